package panel

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind (a
// --watch loop that does not stop, an unclosed server).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
