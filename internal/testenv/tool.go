package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// ToolBuild builds one tool dependency of go.mod once per test binary
// (go's build cache makes later builds quick). The zero value is ready
// to use; it is safe for concurrent use.
type ToolBuild struct {
	mu   sync.Mutex
	path string
}

// Binary builds pkg, the first time it is called, into a directory of the
// system's temporary directory named after name and version, and
// returns the path of the program, name, in it.
func (b *ToolBuild) Binary(t testing.TB, pkg, name, version string) string {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.path != "" {
		return b.path
	}
	dir := filepath.Join(os.TempDir(), "tollgate-"+name+"-"+version)
	Must(t, os.MkdirAll(dir, 0o755))
	tmp, err := os.CreateTemp(dir, "build-*")
	Must(t, err)
	tmp.Close()
	out, err := exec.Command("go", "build", "-o", tmp.Name(), pkg).CombinedOutput()
	if err != nil {
		os.Remove(tmp.Name())
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	path := filepath.Join(dir, name)
	Must(t, os.Rename(tmp.Name(), path))
	b.path = path
	return path
}
