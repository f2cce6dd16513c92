//go:build !unix

package sim

import "errors"

func offloadFile(dir, mode string, size int64) (string, func(), error) {
	return "", nil, errors.New("--sim-offload-file needs a unix system")
}
