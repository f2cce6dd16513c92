// Package serve is the warden serving. Main is `warden serve`: it finds
// GPUs or CPU cores, launches one engine per rank (launch) and puts the
// proxy in front of them, and owns the shutdown order (serve.go). Route is
// `warden route`: the same proxy in front of servers that already run, the
// replica list re-read on SIGHUP, the session table saved across restarts
// (route.go). Devices is `warden devices` (devices.go). router.go holds
// what Main and Route share: the router's settings (Router, validated into a
// proxy.Config), the HTTP server, the logger, the registry and the drain.
//
// Each takes its options as the command line gives them (command
// fills them from the flags and their WARDEN_* variables), checks them, and
// runs until SIGINT/SIGTERM or its context ends; errors carry the exit
// status (internal/exit).
package serve
