package monitoring

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// The committed dashboard is what the code generates: run
// `go generate ./monitoring` after changing Rows.
func TestDashboardFileIsGenerated(t *testing.T) {
	want, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("warden-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("warden-dashboard.json differs from monitoring.JSON(): run go generate ./monitoring")
	}
}

// The file is a Grafana dashboard that imports as is: panels with unique
// ids that fit the 24-column grid, every target on the data source
// variable, and the box and replica variables every query selects with.
func TestDashboardShape(t *testing.T) {
	b, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct{ Name, Type string } `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID      int                      `json:"id"`
			Type    string                   `json:"type"`
			Title   string                   `json:"title"`
			GridPos struct{ H, W, X, Y int } `json:"gridPos"`
			Targets []struct {
				RefID      string               `json:"refId"`
				Expr       string               `json:"expr"`
				Datasource struct{ UID string } `json:"datasource"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" || vars["instance"] != "query" || vars["replica"] != "query" {
		t.Errorf("variables %v, want datasource, instance (the box) and replica", vars)
	}
	ids, queries := map[int]bool{}, 0
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if g := p.GridPos; g.X < 0 || g.W <= 0 || g.X+g.W > 24 || g.H <= 0 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
		}
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			if tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q %s: data source %q, want the ${datasource} variable", p.Title, tg.RefID, tg.Datasource.UID)
			}
			if !strings.Contains(tg.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q %s does not select the box: %s", p.Title, tg.RefID, tg.Expr)
			}
		}
	}
	if queries < 6 || queries != len(Queries()) {
		t.Errorf("%d queries in the file, %d in Rows; want the same, at least 6", queries, len(Queries()))
	}
}
