package sim

import (
	"fmt"
	"os"

	"github.com/lmwarden/warden/sim/model"
)

// FirstContact is what someone meeting the simulator through `warden serve
// --engine sim` (or `warden run` against it) must know before the first
// answer, in lines of under 90 characters, for the engines' arguments args
// (what follows serve's --): that answers are filler text, how long they
// run and how to make them short, and how fast simulated time runs. Nil
// when args do not parse (the engines will then say why).
func FirstContact(args []string) []string {
	c, err := ParseArgs(append([]string{"model"}, args...), os.Getenv) // the model is serve's to give
	if err != nil {
		return nil
	}
	lines := []string{"the engines are the built-in simulator: its answers are filler text, not a model's"}
	if c.OutputTokens > 0 {
		lines = append(lines, fmt.Sprintf("each answer is %d tokens long (--sim-output-tokens)", c.OutputTokens))
	} else {
		lines = append(lines,
			fmt.Sprintf("answers are as long as coding agents' (median %d tokens, one in ten over %d) and come",
				model.OutputTokensAt(0.5), model.OutputTokensAt(0.9)),
			"at the reference GPU's speed, so one can take a minute; for short ones start the warden",
			"with -- --sim-output-tokens 20")
	}
	if c.TimeScale != 1 {
		lines = append(lines, fmt.Sprintf("simulated time runs %g x wall time (--sim-time-scale)", c.TimeScale))
	}
	return lines
}
