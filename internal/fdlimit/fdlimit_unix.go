//go:build unix

package fdlimit

import (
	"fmt"
	"syscall"
)

// Raise sets the soft RLIMIT_NOFILE to the hard limit when it is lower by
// more than the one Go's runtime keeps back.
// Where the kernel refuses the hard limit (macOS caps it below an
// unlimited hard limit), the limit is left as it was and the error says so.
func Raise() (Limit, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return Limit{}, fmt.Errorf("reading the file-descriptor limit: %w", err)
	}
	l := Limit{Soft: uint64(r.Cur), Hard: uint64(r.Max), From: uint64(r.Cur)} // int64 on some BSDs
	if r.Cur >= r.Max-1 {
		return l, nil
	}
	want := r
	want.Cur = r.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		return l, fmt.Errorf("raising the file-descriptor soft limit from %d to %d: %w", r.Cur, r.Max, err)
	}
	l.Soft = l.Hard
	return l, nil
}
