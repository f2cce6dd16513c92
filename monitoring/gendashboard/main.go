// Command gendashboard writes the warden's Grafana dashboard
// (monitoring.JSON) to the file -o names: `go generate ./monitoring`.
package main

import (
	"flag"
	"log"
	"os"

	"github.com/lmwarden/warden/monitoring"
)

func main() {
	out := flag.String("o", "warden-dashboard.json", "`FILE` to write")
	flag.Parse()
	b, err := monitoring.JSON()
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		log.Fatal(err)
	}
}
