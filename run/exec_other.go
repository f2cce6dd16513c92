//go:build !unix

package run

// terminalForeground is false outside Unix: there is no terminal process
// group to share a Ctrl-C with, so a signal warden gets is passed on.
func terminalForeground() bool { return false }
