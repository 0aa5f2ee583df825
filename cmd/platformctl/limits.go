package main

import (
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// newPoolLimitsCmds returns "platformctl pool limit" and "pool limits".
func newPoolLimitsCmds(a *app) []*cobra.Command {
	var rate, reason string
	var burst, concurrency int32
	limit := &cobra.Command{
		Use:   "limit POOL",
		Short: "Set a pool's rate, burst and concurrency at runtime (admin token)",
		Long: `Set a pool's limits: its rate across every daemon running it (events per
second, "200/s", "12000/m" or "0" for none), its burst (0: the rate) and its
concurrency (0: unchanged). Persisted in the service database and applied by
every daemon within a second, without restarting the pool; audited.`,
		Example: "  platformctl pool limit payments --rate 200/s --concurrency 2 --reason \"PSP allows 200/s\"\n  platformctl pool limit payments --rate 0",
		Args:    cobra.ExactArgs(1),
		RunE: call(a, adminv1.AdminServiceClient.SetPoolLimits,
			func(args []string) (*adminv1.SetPoolLimitsRequest, error) {
				r, err := parseRate(rate)
				if err != nil {
					return nil, err
				}
				return &adminv1.SetPoolLimitsRequest{Pool: args[0], Rate: r, Burst: burst, Concurrency: concurrency, Reason: reason}, nil
			},
			func(w io.Writer, resp *adminv1.SetPoolLimitsResponse) { poolLimitsTable(w, resp.GetLimits()) }),
	}
	limit.Flags().StringVar(&rate, "rate", "", `events per second for the pool across every daemon ("200/s", "12000/m"; "0": no limit); required`)
	limit.Flags().Int32Var(&burst, "burst", 0, "token bucket size (0: the rate)")
	limit.Flags().Int32Var(&concurrency, "concurrency", 0, "workers of the pool (0: unchanged)")
	limit.Flags().StringVar(&reason, "reason", "", "why, for other operators (at most 1024 bytes)")

	limits := &cobra.Command{
		Use:     "limits POOL",
		Short:   "Show a pool's limits in force",
		Example: "  platformctl pool limits payments -o json",
		Args:    cobra.ExactArgs(1),
		RunE: call(a, adminv1.AdminServiceClient.GetPoolLimits,
			func(args []string) (*adminv1.GetPoolLimitsRequest, error) {
				return &adminv1.GetPoolLimitsRequest{Pool: args[0]}, nil
			},
			func(w io.Writer, resp *adminv1.GetPoolLimitsResponse) { poolLimitsTable(w, resp.GetLimits()) }),
	}
	return []*cobra.Command{limit, limits}
}

// parseRate parses a rate: "200", "200/s", "12000/m", "1000/h".
func parseRate(s string) (float64, error) {
	if s == "" {
		return 0, usagef("--rate is required (0 lifts the limit)")
	}
	num, per := s, 1.0
	if i := strings.IndexByte(s, '/'); i >= 0 {
		num = s[:i]
		switch s[i+1:] {
		case "s":
		case "m":
			per = 60
		case "h":
			per = 3600
		default:
			return 0, usagef("--rate %q: the unit after / must be s, m or h", s)
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, usagef("--rate %q is not a number of events per second (e.g. 200/s)", s)
	}
	return v / per, nil
}

// poolLimitsTable prints a pool's limits.
func poolLimitsTable(w io.Writer, l *adminv1.PoolLimits) {
	row(w, "POOL", "RATE", "BURST", "CONCURRENCY", "REASON", "UPDATED_AT", "UPDATED_BY")
	rate := "none"
	if l.GetRate() > 0 {
		rate = strconv.FormatFloat(l.GetRate(), 'f', -1, 64) + "/s"
	}
	row(w, l.GetPool(), rate, strconv.Itoa(int(l.GetBurst())), strconv.Itoa(int(l.GetConcurrency())),
		orDash(oneLine(l.GetReason())), formatTime(l.GetUpdatedAt()), orDash(l.GetUpdatedBy()))
}

// newPauseAllCmd returns "platformctl pause-all".
func newPauseAllCmd(a *app) *cobra.Command {
	var service, reason string
	cmd := &cobra.Command{
		Use:   "pause-all",
		Short: "The kill switch: stop every pool of a service, or of every service (admin token)",
		Long: `The kill switch: every pool of --service, or of every service, finishes its
in-flight work and takes no new messages. Persisted: a daemon that starts
while it holds consumes nothing. Lifted by resume-all; audited.`,
		Example: "  platformctl pause-all --reason \"incident 4711\"\n  platformctl pause-all --service billing --reason \"PSP down\"",
		Args:    cobra.NoArgs,
		RunE: call(a, adminv1.AdminServiceClient.PauseAll,
			func([]string) (*adminv1.PauseAllRequest, error) {
				if reason == "" {
					return nil, usagef("--reason is required")
				}
				return &adminv1.PauseAllRequest{Service: service, Reason: reason}, nil
			},
			func(w io.Writer, resp *adminv1.PauseAllResponse) { switchesTable(w, resp.GetServices()) }),
	}
	cmd.Flags().StringVar(&service, "service", "", "only this service (default: every service)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for other operators; required")
	return cmd
}

// newResumeAllCmd returns "platformctl resume-all".
func newResumeAllCmd(a *app) *cobra.Command {
	var service string
	cmd := &cobra.Command{
		Use:     "resume-all",
		Short:   "Lift the kill switch of a service, or of every service (admin token)",
		Example: "  platformctl resume-all\n  platformctl resume-all --service billing",
		Args:    cobra.NoArgs,
		RunE: call(a, adminv1.AdminServiceClient.ResumeAll,
			func([]string) (*adminv1.ResumeAllRequest, error) {
				return &adminv1.ResumeAllRequest{Service: service}, nil
			},
			func(w io.Writer, resp *adminv1.ResumeAllResponse) { switchesTable(w, resp.GetServices()) }),
	}
	cmd.Flags().StringVar(&service, "service", "", "only this service (default: every service)")
	return cmd
}

// switchesTable prints kill switches.
func switchesTable(w io.Writer, sw []*adminv1.ServicePause) {
	row(w, "SERVICE", "PAUSED", "REASON", "UPDATED_AT", "UPDATED_BY")
	for _, s := range sw {
		row(w, s.GetService(), strconv.FormatBool(s.GetPaused()), orDash(oneLine(s.GetReason())), formatTime(s.GetUpdatedAt()), orDash(s.GetUpdatedBy()))
	}
}
