//go:build !linux

package journal

import "os"

// isJournal is false: the journal runs on Linux only.
func isJournal(*os.File, string) bool { return false }
