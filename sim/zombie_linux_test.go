//go:build linux

package sim_test

import (
	"os"
	"strconv"
	"strings"
)

// isZombie reports whether pid is a zombie (dead, not yet reaped).
func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}
