package journal

import (
	"fmt"
	"os"
	"syscall"
)

// isJournal reports whether f is the stream JOURNAL_STREAM ("DEV:INODE")
// names: systemd sets it for a service whose output goes to the journal,
// and a child that inherited the variable but not the stream must not
// take it for one.
func isJournal(f *os.File, stream string) bool {
	if stream == "" {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return stream == fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}
