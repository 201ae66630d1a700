//go:build faults

package usage

import (
	"os"
	"path/filepath"
	"time"
)

// With the "faults" build tag (the fault suite's builds, never a
// release), a worker whose TOLLGATE_FAULTS_DIR is set stops right after
// committing a fetch, before acknowledging it, whenever the file
// hold-after-commit exists in that directory: it writes the first entry's
// ID to the file held there and sleeps until it is killed.
func init() {
	dir := os.Getenv("TOLLGATE_FAULTS_DIR")
	if dir == "" {
		return
	}
	faultAfterApply = func(m Message) error {
		if _, err := os.Stat(filepath.Join(dir, "hold-after-commit")); err != nil {
			return nil
		}
		tmp := filepath.Join(dir, "held.tmp")
		if err := os.WriteFile(tmp, []byte(m.ID), 0o644); err == nil {
			_ = os.Rename(tmp, filepath.Join(dir, "held"))
		}
		for {
			time.Sleep(time.Hour)
		}
	}
}
