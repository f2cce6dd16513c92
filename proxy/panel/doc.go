// Package panel owns what users see of routing: the Status snapshot type
// served at /warden/status, the HTML status page (assets embedded), the
// `warden status` terminal table, the exit summary, and the Prometheus
// collector that mirrors per-replica state at scrape time.
package panel
