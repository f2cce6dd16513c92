// Package report is the one writer family of the warden's result files:
// tables as Markdown (the reference table's look) and CSV, JSON, a line
// chart as SVG, and a folder of such files written at once. `warden bench`
// (bench/report.go, bench/svg.go) and `warden sweep` (sweep/report.go) say
// what goes in them.
package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/jedib0t/go-pretty/v6/table"
	"github.com/jedib0t/go-pretty/v6/text"
)

// Missing is what a cell shows for a value that is not known.
const Missing = "–"

// Table is rows of text cells under a header.
type Table struct {
	Header []string
	Rows   [][]string
	Right  []bool // per column: aligned right (numbers); missing entries: left
}

// Markdown renders the table as Markdown, ending in a blank line's newline
// (a "|" in a cell is escaped).
func (t Table) Markdown() string {
	w := table.NewWriter()
	w.AppendHeader(row(t.Header))
	for _, r := range t.Rows {
		w.AppendRow(row(r))
	}
	var cols []table.ColumnConfig
	for i, right := range t.Right {
		if right {
			cols = append(cols, table.ColumnConfig{Number: i + 1, Align: text.AlignRight})
		}
	}
	w.SetColumnConfigs(cols)
	return w.RenderMarkdown() + "\n"
}

func row(cells []string) table.Row {
	r := make(table.Row, len(cells))
	for i, c := range cells {
		r[i] = c
	}
	return r
}

// WriteCSV writes the header and the rows as CSV.
func (t Table) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(t.Header)
	for _, r := range t.Rows {
		_ = cw.Write(r)
	}
	cw.Flush()
	return cw.Error()
}

// Num formats *v with the given decimals; Missing when v is nil.
func Num(v *float64, decimals int) string {
	if v == nil {
		return Missing
	}
	return strconv.FormatFloat(*v, 'f', decimals, 64)
}

// Float is v for CSV: as many digits as it takes.
func Float(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// OptFloat is Float for a value that may be unknown (nil: an empty cell).
func OptFloat(v *float64) string {
	if v == nil {
		return ""
	}
	return Float(*v)
}

// WriteJSON writes v as indented JSON, ending in a newline.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// File is one file of a results folder and what writes it.
type File struct {
	Name  string
	Write func(io.Writer) error
}

// Text is a File whose content is s.
func Text(name, s string) File {
	return File{name, func(w io.Writer) error { _, err := io.WriteString(w, s); return err }}
}

// WriteFiles writes every file into dir (created if missing), in order.
func WriteFiles(dir string, files ...File) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		path := filepath.Join(dir, f.Name)
		out, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := f.Write(out); err != nil {
			out.Close()
			return fmt.Errorf("writing %s: %w", path, err)
		}
		if err := out.Close(); err != nil {
			return err
		}
	}
	return nil
}
