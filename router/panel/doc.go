// Package panel renders what users see of routing from the status
// (router/schema's Status, served as JSON at schema.Path): the HTML status
// page (assets embedded), the `warden status` terminal table, the exit
// summary, the overcommit warning, and the Prometheus collector that
// mirrors per-replica state at scrape time.
//
// The router core fills the Status from live state (router/status.go); the
// admin endpoints mount PageHandler ("/", "/warden", "/warden/",
// "/warden/assets/...") and JSONHandler (StatusPath); the core keeps
// Status.PeakOvercommit with UpdatePeak and turns Overcommit into a
// warning. The page, the table and the summary share one set of number
// formats (format.go; assets/panel.js mirrors it, and the headless-browser
// test checks that they agree).
//
// `warden status` is ShowStatus (view.go); its flags are the command
// layer's. It holds no live state: it renders the Status it fetches
// (schema.Fetch) and never reaches into the core or the engines. The tools
// that only read a status (bench, run, sweep) import router/schema, not
// this package.
package panel
