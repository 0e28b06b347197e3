package main

import (
	"fmt"
	"strings"

	"github.com/lameduck/lameduck/cmd/lameduck/internal/vet"
	"github.com/spf13/cobra"
)

// exitNothingJudged is vet's exit code when it judged no container: the
// input was read, but nothing in it runs lameduck, so nothing was checked
// (docs/vet.md). Distinct from 1 (findings) and 2 (unreadable input), so a
// script can tell the three apart; any non-zero code fails a CI step.
const exitNothingJudged = 3

func newVetCommand() *cobra.Command {
	var opt vet.Options
	var format string
	cmd := &cobra.Command{
		Use:   "vet [FILE|DIR|-]...",
		Short: "Check Kubernetes manifests of lameduck services: the grace arithmetic, the probes, the settings",
		Long: `Read Kubernetes YAML (multi-document files, directories, - for stdin, the output
of helm template) and judge every container that runs lameduck in
Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs and Pods
(native sidecars included), by any sign the manifest shows: a LAMEDUCK_*
variable, --container or --runner, or a probe (or the preStop hook) on a
path lameduck serves (/healthz, /livez, /readyz, /readyz/<check>,
/startupz, or the paths LAMEDUCK_*_PATH(S) renames) or a gRPC probe of the
service liveness or readiness. Every other container is listed as skipped,
with the reason, on stdout.

The settings are resolved exactly as the binary resolves them at startup
inside a pod (the same parser, defaults and errors; with no LAMEDUCK_*
variable, the binary's Kubernetes defaults), and the grace arithmetic is
the one its startup log prints:
  preStop sleep + lame-duck window + teardown ≤ terminationGracePeriodSeconds

Rules (docs/vet.md): ` + ruleIDs() + `.

Every finding is at the line of the field it is about; --format json and
sarif carry its numbers as JSON numbers ("values"; seconds in *_seconds).

Exit code: 0 when clean, 1 with findings, 2 when the input cannot be read
or holds no YAML document at all (a failed helm template upstream), 3 when
no container was judged: nothing lameduck in the input, so nothing was
checked (never reported clean).

Examples:
  helm template deploy/helm/lameduck-demo | lameduck vet -
  lameduck vet deploy/k8s/
  lameduck vet --format sarif k8s/ > vet.sarif`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = []string{"-"}
			}
			switch format {
			case "text", "json", "sarif":
			default:
				return usageError{fmt.Errorf("--format=%q: use text, json or sarif", format)}
			}
			objs, docs, err := vet.ReadInputs(args, cmd.InOrStdin())
			if err != nil {
				return usageError{err}
			}
			if docs == 0 {
				// An empty input is never clean: it is what a failed
				// `helm template … | lameduck vet -` hands over, and a CI
				// gate without pipefail would pass on it.
				return usageError{fmt.Errorf("lameduck: vet read no YAML document from %s; check the command that produced the input (helm template's own error, an empty directory)", strings.Join(args, ", "))}
			}
			rep := vet.Run(objs, opt)
			findings := rep.Findings
			sum := vet.Summary{Documents: docs, Workloads: vet.Workloads(objs), Containers: rep.Containers, Skipped: len(rep.Skipped), Findings: len(findings)}
			out := cmd.OutOrStdout()
			switch format {
			case "json":
				err = vet.WriteJSON(out, findings, rep.Judged, rep.Skipped, sum)
			case "sarif":
				err = vet.WriteSARIF(out, findings, sum, versionText())
			default:
				err = vet.WriteText(out, findings, rep.Skipped, sum)
			}
			if err != nil {
				return err
			}
			if rep.Containers == 0 {
				// Said on stdout already; the exit code makes a CI gate
				// notice that nothing was checked.
				return codeError{fmt.Errorf("lameduck vet %s", sum.NothingJudged()), exitNothingJudged}
			}
			if len(findings) > 0 {
				return exitError{fmt.Errorf("%d finding(s)", len(findings))}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&opt.Containers, "container", nil, "also judge the container with this name, whatever its manifest shows (repeatable)")
	f.StringArrayVar(&opt.Runners, "runner", nil, "judge the container with this name as a runner (package worker; repeatable)")
	f.StringArrayVar(&opt.Skip, "skip", nil, "never judge the container with this name, whatever it shows (repeatable)")
	f.StringVar(&format, "format", "text", "output: text, json or sarif")
	return cmd
}

// ruleIDs lists vet's rule ids for the help text, from vet.Rules itself,
// in lines of at most 72 characters after the first.
func ruleIDs() string {
	var b strings.Builder
	line := len("Rules (docs/vet.md): ")
	for i, r := range vet.Rules {
		if i > 0 {
			b.WriteString(",")
			line++
			if line+1+len(r.ID) > 72 {
				b.WriteString("\n")
				line = 0
			} else {
				b.WriteString(" ")
				line++
			}
		}
		b.WriteString(r.ID)
		line += len(r.ID)
	}
	return b.String()
}
