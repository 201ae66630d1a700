// Package buildinfo says which build of Tollgate is running: the release
// version set when linking, the VCS revision the Go toolchain stamped, and
// the Go version. Both binaries print it for --version and export it as
// the tollgate_build_info metric.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is the release, set when linking:
//
//	go build -ldflags "-X github.com/tollgate/tollgate/internal/buildinfo.Version=v1.4.0" ./cmd/api
//
// It is "dev" when not set (unless the module itself was built at a
// tagged version, e.g. by go install …@v1.4.0).
var Version = "dev"

// Info describes the running binary.
type Info struct {
	Version string
	// Revision is the VCS commit the binary was built from, "unknown"
	// when the toolchain stamped none (a build outside a git checkout, or
	// with -buildvcs=false). Modified is true when the work tree had
	// uncommitted changes.
	Revision  string
	Modified  bool
	GoVersion string
}

// Read returns the running binary's Info.
func Read() Info {
	i := Info{Version: Version, Revision: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i
	}
	if i.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		i.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// String is the version line of --version, e.g.
// "v1.4.0 (revision 3f2c9a1b7d10, go1.26.8)".
func (i Info) String() string {
	rev := i.Revision
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if i.Modified {
		rev += ", modified"
	}
	return fmt.Sprintf("%s (revision %s, %s)", i.Version, rev, i.GoVersion)
}

// Collector returns the gauge tollgate_build_info{version,revision,go_version},
// always 1, the usual way to join a build's identity to other series.
func Collector() prometheus.Collector {
	i := Read()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_build_info",
		Help: "Always 1; the labels say which build is running (version, VCS revision, Go version).",
		ConstLabels: prometheus.Labels{
			"version": i.Version, "revision": i.Revision, "go_version": i.GoVersion,
		},
	})
	g.Set(1)
	return g
}
