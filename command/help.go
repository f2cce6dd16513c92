package command

import (
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
	"github.com/xrash/smetrics"
)

// helpWidth is the widest line any help text may have (a test holds every
// command's --help to it).
const helpWidth = 100

// usageColumn is where a flag's usage text starts in --help, counted from
// the flag's own indent of three; a flag whose names are wider gets its
// usage on the lines below.
const usageColumn = 30

// configure sets the tree's conventions on every command: help wrapped to
// helpWidth, a usage error as its one line with a "did you mean" and a
// pointer to --help (never the whole help), an unknown command named with
// the close one or the list, and required flags checked after the help
// flag, also with one line.
func configure(app *cli.App) *cli.App {
	useHelpLayout()
	app.CommandNotFound = commandNotFound
	app.OnUsageError = usageError
	for _, c := range app.Commands {
		configureCommand(c)
	}
	return app
}

// configureCommand sets configure's conventions on c and its subcommands:
// OnUsageError, and a Before that checks the flags marked Required (urfave/
// cli would print the whole help with the error; the mark is cleared).
func configureCommand(c *cli.Command) {
	c.OnUsageError = usageError
	var required []string
	for _, f := range c.Flags {
		if rf, ok := f.(cli.RequiredFlag); ok && rf.IsRequired() {
			required = append(required, f.Names()[0])
			setField(f, "Required", false)
		}
	}
	if len(required) > 0 {
		before := c.Before
		c.Before = func(ctx *cli.Context) error {
			for _, name := range required {
				if !ctx.IsSet(name) {
					return usageExit(ctx, fmt.Sprintf("--%s is required%s", name, envHint(ctx.Command, name)))
				}
			}
			if before != nil {
				return before(ctx)
			}
			return nil
		}
	}
	for _, s := range c.Subcommands {
		configureCommand(s)
	}
}

// setField sets a field every urfave/cli flag type has (Category, Required).
func setField(f cli.Flag, field string, v any) {
	fv := reflect.ValueOf(f).Elem().FieldByName(field)
	if fv.IsValid() && fv.CanSet() {
		fv.Set(reflect.ValueOf(v))
	}
}

// inCategory puts flags in the --help group cat and returns them.
func inCategory(cat string, flags ...cli.Flag) []cli.Flag {
	for _, f := range flags {
		setField(f, "Category", cat)
	}
	return flags
}

// envHint is " (or WARDEN_X)" for the flag name of cmd, "" when it has none.
func envHint(cmd *cli.Command, name string) string {
	for _, f := range cmd.Flags {
		if df, ok := f.(cli.DocGenerationFlag); ok && slices.Contains(f.Names(), name) && len(df.GetEnvVars()) > 0 {
			return " (or " + strings.Join(df.GetEnvVars(), ", ") + ")"
		}
	}
	return ""
}

// helpName is how the user typed the command ("warden serve").
func helpName(ctx *cli.Context) string {
	if ctx.Command != nil && ctx.Command.HelpName != "" {
		return ctx.Command.HelpName
	}
	return ctx.App.Name
}

// usageExit is a usage error: its one line, where --help is, and status 2.
func usageExit(ctx *cli.Context, msg string) error {
	name := helpName(ctx)
	return cli.Exit(fmt.Sprintf("%s: %s\nRun '%s --help' for its usage.", name, msg, name), 2)
}

// flagDash finds the Go flag package's one-dash spelling of a long flag.
var flagDash = regexp.MustCompile(`flag -([a-z][a-z0-9-]+)`)

// usageError is every command's OnUsageError: a flag parse error as one
// line, with the flag meant when the name is a near miss.
func usageError(ctx *cli.Context, err error, _ bool) error {
	msg := flagDash.ReplaceAllString(err.Error(), "flag --$1")
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		name = strings.TrimPrefix(name, "-")
		msg = "unknown flag --" + name
		if len(name) == 1 {
			msg = "unknown flag -" + name
		}
		var flags []cli.Flag
		if ctx.Command != nil {
			flags = ctx.Command.Flags
		} else {
			flags = ctx.App.Flags
		}
		var names []string
		for _, f := range flags {
			names = append(names, f.Names()...)
		}
		has := func(n string) bool { return slices.Contains(names, n) }
		if hint := flagHint(name, has, ctx.Command != nil && ctx.Command.Name == "serve"); hint != "" {
			msg += "; " + hint
		} else if near := nearest(name, names); near != "" {
			msg += "; did you mean --" + near + "?"
		}
	}
	return usageExit(ctx, msg)
}

// commandNotFound answers a command name the tree does not have (`warden
// sevre`, `warden run aider`): the close one if any, and the names it knows.
func commandNotFound(ctx *cli.Context, name string) {
	parent := ctx.Command
	what := "command"
	if parent != nil && parent.Name == "run" {
		what = "agent"
	}
	var known []string
	if parent != nil {
		for _, c := range parent.Subcommands {
			if !c.Hidden && c.Name != "help" {
				known = append(known, c.Name)
			}
		}
	}
	if len(known) == 0 {
		for _, c := range ctx.App.VisibleCommands() {
			if c.Name != "help" {
				known = append(known, c.Name)
			}
		}
	}
	msg := fmt.Sprintf("no %s %q", what, name)
	if near := nearest(name, known); near != "" {
		msg += "; did you mean " + near + "?"
	}
	msg += fmt.Sprintf("\n%s has these %ss: %s.", helpName(ctx), what, strings.Join(known, ", "))
	err := usageExit(ctx, msg)
	if ctx.App.ExitErrHandler != nil {
		ctx.App.ExitErrHandler(ctx, err)
		return
	}
	cli.HandleExitCoder(err)
}

// nearest is the name in names closest to typed by Jaro-Winkler similarity
// (urfave/cli's own measure), or "" when none is close enough to be meant.
func nearest(typed string, names []string) string {
	best, score := "", 0.0
	for _, n := range names {
		if s := smetrics.JaroWinkler(typed, n, 0.7, 4); s > score {
			best, score = n, s
		}
	}
	if score < 0.8 {
		return ""
	}
	return best
}

// flagsTemplate lists the flags by category, each as flagString lays it
// out (urfave/cli's own templates re-wrap them, or align them with tabs
// past any width).
const flagsTemplate = `{{range .VisibleFlagCategories}}{{if .Name}}

   {{.Name}}:{{end}}{{range .Flags}}
   {{.}}{{end}}{{else}}{{range .VisibleFlags}}
   {{.}}{{end}}{{end}}`

// useHelpLayout sets urfave/cli's help printer, templates and flag layout
// (package variables of urfave/cli, which only this package imports) to the
// tree's: wrapped at helpWidth, flags by flagString. Idempotent.
func useHelpLayout() {
	for _, t := range []*string{&cli.AppHelpTemplate, &cli.CommandHelpTemplate, &cli.SubcommandHelpTemplate} {
		*t = strings.ReplaceAll(*t, `{{if .VisibleFlagCategories}}`, `{{if .VisibleFlags}}`)
		*t = strings.ReplaceAll(*t, `{{template "visibleFlagCategoryTemplate" .}}`, flagsTemplate)
		*t = strings.ReplaceAll(*t, `{{else if .VisibleFlags}}

OPTIONS:{{template "visibleFlagTemplate" .}}`, "")
		*t = strings.ReplaceAll(*t, `{{else if .VisibleFlags}}

GLOBAL OPTIONS:{{template "visibleFlagTemplate" .}}`, "")
	}
	cli.FlagStringer = flagString
	cli.HelpPrinter = func(w io.Writer, templ string, data any) {
		cli.HelpPrinterCustom(w, templ, data, map[string]any{"wrap": wrapHelp})
	}
}

// columnGap finds the gap of two or more spaces after a line's first word,
// where a laid-out list's second column starts.
var columnGap = regexp.MustCompile(`^\s*\S+(\s\S+)*?\s{2,}`)

// paragraphs splits text into lines, joining a line that starts with a word
// to the one before it when that also did: authored line breaks in prose
// are re-flowed to the width, indented lines (examples, lists) are kept.
func paragraphs(text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		n := len(out)
		if n > 0 && line != "" && line[0] != ' ' && out[n-1] != "" && out[n-1][0] != ' ' {
			out[n-1] += " " + line
			continue
		}
		out = append(out, line)
	}
	return out
}

// wrapHelp is the help templates' wrap: text printed at column offset, its
// lines after the first indented by offset, every line kept within
// helpWidth. A line too long keeps its layout: it continues under its
// second column when it has one ("  --flag      text"), else under its own
// indent.
func wrapHelp(input string, offset int) string {
	width := helpWidth - offset
	pad := strings.Repeat(" ", offset)
	var out []string
	for i, line := range paragraphs(input) {
		var lines []string
		if len(line) <= width {
			lines = []string{line}
		} else {
			hang := len(line) - len(strings.TrimLeft(line, " "))
			if m := columnGap.FindString(line); m != "" && len(m) < width/2 {
				hang = len(m)
			}
			rest := wrapWords(line[hang:], width-hang)
			lines = []string{line[:hang] + rest[0]} // the head as it was laid out
			for _, r := range rest[1:] {
				lines = append(lines, strings.Repeat(" ", hang)+r)
			}
		}
		for j, l := range lines {
			if i > 0 || j > 0 {
				if l != "" {
					l = pad + l
				}
			}
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// defaultFlagStringer is urfave/cli's own, which flagString lays out.
var defaultFlagStringer = cli.FlagStringer

// flagString lays out one flag for --help: its names, then its usage (with
// the default and the variable) wrapped at helpWidth in a column of its own.
func flagString(f cli.Flag) string {
	names, usage, ok := strings.Cut(defaultFlagStringer(f), "\t")
	if !ok {
		return names
	}
	usage = strings.Replace(usage, " (default: false)", "", 1) // a switch is off unless given
	const indent = 3                                           // the help template's
	pad := strings.Repeat(" ", indent+usageColumn)
	lines := wrapWords(usage, helpWidth-indent-usageColumn)
	var b strings.Builder
	b.WriteString(names)
	if len(names)+2 <= usageColumn {
		b.WriteString(strings.Repeat(" ", usageColumn-len(names)))
	} else {
		b.WriteString("\n" + pad)
	}
	b.WriteString(strings.Join(lines, "\n"+pad))
	return b.String()
}

// wrapWords breaks s into lines of at most width characters at spaces.
func wrapWords(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case len(line)+1+len(w) > width:
			lines = append(lines, line)
			line = w
		default:
			line += " " + w
		}
	}
	return append(lines, line)
}
