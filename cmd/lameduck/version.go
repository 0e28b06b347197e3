package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/lameduck/lameduck/health"
	"github.com/spf13/cobra"
)

// coreModule is the library module whose version `lameduck version` also
// reports when the command was built against a released copy of it.
const coreModule = "github.com/lameduck/lameduck"

// versionText is what `lameduck version` and `lameduck --version` print:
//
//	lameduck v1.2.0
//	commit   4f1c0de2…   (vcs.revision; "-dirty" when vcs.modified is true)
//	go       go1.26.0 linux/amd64
//
// The version and commit come from the binary's build information
// (runtime/debug.ReadBuildInfo) through health.BuildInfo, so they are the
// very words every probe body carries in "version" and "commit". A binary
// built from a work tree says "(devel)"; one built without VCS stamping
// (-buildvcs=false, or outside a repository) says commit "unknown". When
// the command was built against a released core module (not a replace
// directive), a "library" line names that module's version.
func versionText() string {
	version, commit := health.BuildInfo()
	var b strings.Builder
	fmt.Fprintf(&b, "lameduck %s\n", version)
	fmt.Fprintf(&b, "commit   %s\n", commit)
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == coreModule && d.Replace == nil && d.Version != "" && d.Version != "(devel)" {
				fmt.Fprintf(&b, "library  %s %s\n", d.Path, d.Version)
			}
		}
	}
	fmt.Fprintf(&b, "go       %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return b.String()
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version of this binary",
		Long: `Print the module version, the commit it was built from ("-dirty" when the
work tree had uncommitted changes) and the Go version, from the binary's build
information. The same version and commit appear in every probe body.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(cmd.OutOrStdout(), versionText())
			return err
		},
	}
}
