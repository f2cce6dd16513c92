// Package realenvoy is the real-Envoy test tier (tests only): `warden epp`
// behind Envoy 1.40 (scripts/envoy.sh installs it into .envoy/) in front of
// simulated engines, with the bootstrap `warden epp envoy-config` prints.
// Without Envoy the tests skip and say why; with WARDEN_REQUIRE_ENVOY=1 (CI)
// they fail instead.
package realenvoy
