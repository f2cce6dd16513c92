//go:build unix

package command

// processGroups is nil where engines can be started and stopped as
// process groups (Linux, macOS, the BSDs).
func processGroups(string) error { return nil }
