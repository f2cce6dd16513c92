// Package enginelog reads what an engine's output says: its last lines and
// the lines that can state a cause, kept in bounded memory (Tail), and why
// it stopped (Tail.Diagnose, Hint). A line that can state a cause is an
// exception, an error logged at ERROR or above, or a line with the marker
// of one of engineplan's hint rules; warnings, INFO lines and traceback
// frames never are. vLLM states a cause once, in the process that hit it,
// and the tracebacks of the processes above it push it out of the last
// lines, so a Tail keeps cause lines from anywhere in the output.
//
// Package launch feeds each engine process's log file through a Tail and
// turns its Diagnosis into the startup error and the crash report.
package enginelog
