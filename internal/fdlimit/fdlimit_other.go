//go:build !unix

package fdlimit

import "errors"

// Raise does nothing where there is no RLIMIT_NOFILE.
func Raise() (Limit, error) {
	return Limit{}, errors.ErrUnsupported
}
