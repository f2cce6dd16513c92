// Package panel owns what users see of routing: the Status snapshot type
// served at /warden/status, the HTML status page (assets embedded), the
// `warden status` terminal table, the exit summary, and the Prometheus
// collector that mirrors per-replica state at scrape time.
//
// The proxy fills Status (types.go) from live state and mounts
// PageHandler ("/", "/warden", "/warden/", "/warden/assets/...") and
// JSONHandler (StatusPath); it keeps Status.PeakOvercommit with UpdatePeak
// and turns Overcommit into a warning. The page, the table and the summary
// share one set of number formats (format.go; assets/panel.js mirrors it,
// and the headless-browser test checks that they agree).
//
// `warden status` is ShowStatus (view.go); its flags are internal/command's.
// It imports nothing of the project but internal/exit (the status `warden
// status` exits with) and holds no live state: it renders the Status it is
// handed and never reaches into the proxy or the engines.
package panel
