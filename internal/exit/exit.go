// Package exit is an error that carries the status the warden exits with:
// libraries (serve, run, sweep, bench, the panel's `warden status`) return
// one where the status matters (2 for a usage error, 130 for an interrupt,
// an agent's own status), and the command layer (command) turns it
// into the exit. An error without a status exits 1.
package exit

import (
	"errors"
	"fmt"
)

// Error is a message and the exit status that goes with it. An empty
// message prints nothing.
type Error struct {
	Code int
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// New is an exit with status code and message msg.
func New(code int, msg string) error { return &Error{Code: code, Msg: msg} }

// Newf is New with a formatted message.
func Newf(code int, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// As returns the *Error in err's chain, if there is one.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
