// Package serve is the warden serving. Main is `warden serve`: it finds
// GPUs or CPU cores, launches one engine per rank (launch) and puts the
// router core and the HTTP proxy in front of them, and owns the shutdown
// order (serve.go). Route is `warden route`: the same core and proxy in
// front of servers that already run, the replica list re-read on SIGHUP,
// the session table saved across restarts (route.go). EPP is `warden epp`:
// the core behind a gateway, as its endpoint picker (package epp) on a gRPC
// port, the panel and /metrics on the HTTP one, llm-d's endpoints file
// followed (epp.go). Devices is `warden devices` (devices.go). router.go
// holds what they share: the router's settings (Router, validated into a
// router.Config and a proxy.Config), the core and proxy built together
// (newHTTP), the HTTP server, the logger, the registry and the drain.
//
// Each takes its options as the command line gives them (the command layer,
// package command, fills them from the flags and their WARDEN_* variables),
// checks them, and runs until SIGINT/SIGTERM or its context ends; errors
// carry the exit status (internal/exit).
package serve
