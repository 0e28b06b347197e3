package health

import "runtime/debug"

// BuildInfo returns the version and commit of the running binary, read from
// [debug.ReadBuildInfo].
//
// version is the main module's version ("(devel)" for a binary built from a
// work tree, "unknown" when the binary carries no build information). commit
// is the vcs.revision build setting, with "-dirty" appended when
// vcs.modified is true, or "unknown" when the binary was built without VCS
// stamping (-buildvcs=false, or outside a repository). Both can be
// overridden by the caller; see [Info].
//
// BuildInfo is safe for concurrent use; it reads process-wide, immutable
// data.
func BuildInfo() (version, commit string) {
	return fromBuildInfo(debug.ReadBuildInfo())
}

// fromBuildInfo is BuildInfo's rule applied to what ReadBuildInfo returned.
func fromBuildInfo(bi *debug.BuildInfo, ok bool) (version, commit string) {
	version, commit = "unknown", "unknown"
	if !ok || bi == nil {
		return version, commit
	}
	if bi.Main.Version != "" {
		version = bi.Main.Version
	}
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if s.Value != "" {
				commit = s.Value
			}
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && commit != "unknown" {
		commit += "-dirty"
	}
	return version, commit
}
