package launch

import (
	"path/filepath"
	"strconv"

	"github.com/lmwarden/warden/gpu"
)

// Specs builds one Spec per rank r: port ports[r], the command line
// argv(port) (engineplan.Engine.Argv), the GPUs of groups[r] (as UUIDs, see
// gpu.VisibleDevices; groups may be nil for the simulator) and the log file
// logDir/rank-r.log. extraEnv is added to every rank's environment.
func Specs(argv func(port int) []string, ports []int, groups [][]gpu.Device, logDir string, extraEnv ...string) []Spec {
	specs := make([]Spec, len(ports))
	for r, port := range ports {
		specs[r] = Spec{
			Rank: r, Port: port, Argv: argv(port), Env: extraEnv,
			LogPath: filepath.Join(logDir, "rank-"+strconv.Itoa(r)+".log"),
		}
		if r < len(groups) {
			specs[r].GPUs = gpu.VisibleDevices(groups[r])
		}
	}
	return specs
}
