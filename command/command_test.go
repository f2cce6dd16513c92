package command

import (
	"bytes"
	"context"
	"testing"

	"github.com/urfave/cli/v2"
)

// runWarden runs `warden args...` through the command tree in-process and
// returns what it printed and the error it would exit with.
func runWarden(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runWardenContext(t, context.Background(), args...)
}

// runWardenContext is runWarden with a context (canceled: SIGINT).
func runWardenContext(t *testing.T, ctx context.Context, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := App("test")
	app.Writer, app.ErrWriter, app.ExitErrHandler = &out, &errOut, func(*cli.Context, error) {}
	err = app.RunContext(ctx, append([]string{"warden"}, args...))
	return out.String(), errOut.String(), err
}

// exitCode is the status an error exits with: a cli.ExitCoder's, else -1.
func exitCode(err error) int {
	if ec, ok := err.(cli.ExitCoder); ok {
		return ec.ExitCode()
	}
	return -1
}
