//go:build !unix

package offsets

import (
	"errors"
	"os"
)

var errNoFlock = errors.New("the embedded checkpoint store needs flock, which this operating system lacks; use the Redis store")

func tryLock(*os.File) (bool, error) { return false, errNoFlock }

func unlockFile(*os.File) error { return errNoFlock }
