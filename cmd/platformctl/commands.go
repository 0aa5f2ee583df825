package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// newServicesCmd returns "platformctl services".
func newServicesCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "services",
		Short:   "List the services with their replay horizons and last purge",
		Example: "  platformctl services\n  platformctl services -o json",
		Args:    cobra.NoArgs,
		RunE: call(a, adminv1.AdminServiceClient.ListServices,
			func([]string) (*adminv1.ListServicesRequest, error) {
				return &adminv1.ListServicesRequest{}, nil
			},
			func(w io.Writer, resp *adminv1.ListServicesResponse) { servicesTable(w, resp.GetServices()) }),
	}
}

// newPoolsCmd returns "platformctl pools".
func newPoolsCmd(a *app) *cobra.Command {
	var service string
	cmd := &cobra.Command{
		Use:     "pools",
		Short:   "List the worker pools with their state and counters",
		Example: "  platformctl pools\n  platformctl pools --service stock -o json",
		Args:    cobra.NoArgs,
		RunE: call(a, adminv1.AdminServiceClient.ListPools,
			func([]string) (*adminv1.ListPoolsRequest, error) {
				return &adminv1.ListPoolsRequest{Service: service}, nil
			},
			func(w io.Writer, resp *adminv1.ListPoolsResponse) { poolsTable(w, resp.GetPools()) }),
	}
	cmd.Flags().StringVar(&service, "service", "", "only the pools of this service")
	return cmd
}

// newDelaysCmd returns "platformctl delays".
func newDelaysCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "delays",
		Short: "List the shared retry delay queues with the retries waiting in each",
		Long: "List the retry delay queues the daemon's pools use, one per distinct delay, shared by every\n" +
			"pool of the broker's vhost: MESSAGES counts the retries of every pool that waits that delay.",
		Example: "  platformctl delays\n  platformctl delays -o json",
		Args:    cobra.NoArgs,
		RunE: call(a, adminv1.AdminServiceClient.ListDelayQueues,
			func([]string) (*adminv1.ListDelayQueuesRequest, error) {
				return &adminv1.ListDelayQueuesRequest{}, nil
			},
			func(w io.Writer, resp *adminv1.ListDelayQueuesResponse) { delayQueuesTable(w, resp.GetDelayQueues()) }),
	}
}

// newPoolCmd returns "platformctl pool" and its subcommands.
func newPoolCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "pool",
		Short:   "Pause or resume a worker pool (admin token)",
		Example: "  platformctl pool pause stock-events --reason \"db maintenance\"\n  platformctl pool resume stock-events",
	}

	var reason string
	pause := &cobra.Command{
		Use:   "pause POOL",
		Short: "Pause a pool: it finishes its in-flight work and takes no new messages",
		Long: `Pause a pool: it finishes its in-flight work and takes no new messages.
The pause holds across restarts and across every daemon sharing the service
database. Pausing a paused pool changes nothing.`,
		Example: "  platformctl pool pause stock-events --reason \"db maintenance\"",
		Args:    cobra.ExactArgs(1),
		RunE: call(a, adminv1.AdminServiceClient.PausePool,
			func(args []string) (*adminv1.PausePoolRequest, error) {
				return &adminv1.PausePoolRequest{Pool: args[0], Reason: reason}, nil
			},
			func(w io.Writer, resp *adminv1.PausePoolResponse) { poolsTable(w, []*adminv1.Pool{resp.GetPool()}) }),
	}
	pause.Flags().StringVar(&reason, "reason", "", "why, for other operators (at most 1024 bytes)")

	resume := &cobra.Command{
		Use:     "resume POOL",
		Short:   "Resume a paused pool",
		Example: "  platformctl pool resume stock-events",
		Args:    cobra.ExactArgs(1),
		RunE: call(a, adminv1.AdminServiceClient.ResumePool,
			func(args []string) (*adminv1.ResumePoolRequest, error) {
				return &adminv1.ResumePoolRequest{Pool: args[0]}, nil
			},
			func(w io.Writer, resp *adminv1.ResumePoolResponse) { poolsTable(w, []*adminv1.Pool{resp.GetPool()}) }),
	}
	return group(cmd, append([]*cobra.Command{pause, resume}, newPoolLimitsCmds(a)...)...) // limits.go
}

// newLookupCmd returns "platformctl lookup".
func newLookupCmd(a *app) *cobra.Command {
	var service string
	cmd := &cobra.Command{
		Use:   "lookup EVENT_ID",
		Short: "Tell whether an event was processed, when, and when it becomes purgeable",
		Long: `Tell whether an event was processed, by one service or by every service,
when, and when its dedup row becomes purgeable. EVENT_ID is a UUID in
canonical form (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx).`,
		Example: "  platformctl lookup 0b1d7c52-5a4e-4a8e-9d1f-3c0f9a6b2e11\n  platformctl lookup 0b1d7c52-5a4e-4a8e-9d1f-3c0f9a6b2e11 --service stock -o json",
		Args:    cobra.ExactArgs(1),
		RunE: call(a, adminv1.AdminServiceClient.LookupEvent,
			func(args []string) (*adminv1.LookupEventRequest, error) {
				return &adminv1.LookupEventRequest{EventId: args[0], Service: service}, nil
			},
			func(w io.Writer, resp *adminv1.LookupEventResponse) { lookupTable(w, resp.GetResults()) }),
	}
	cmd.Flags().StringVar(&service, "service", "", "look only in this service (default: every service)")
	return cmd
}

// newHorizonCmd returns "platformctl horizon" and its subcommands.
func newHorizonCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "horizon",
		Short:   "Show or change a service's replay horizon",
		Example: "  platformctl horizon get stock\n  platformctl horizon set stock 336h",
	}

	get := &cobra.Command{
		Use:     "get SERVICE",
		Short:   "Show a service's replay horizon and who set it",
		Example: "  platformctl horizon get stock",
		Args:    cobra.ExactArgs(1),
		RunE: call(a, adminv1.AdminServiceClient.GetHorizon,
			func(args []string) (*adminv1.GetHorizonRequest, error) {
				return &adminv1.GetHorizonRequest{Service: args[0]}, nil
			},
			func(w io.Writer, resp *adminv1.GetHorizonResponse) { horizonTable(w, resp.GetHorizon()) }),
	}

	var force bool
	set := &cobra.Command{
		Use:   "set SERVICE DURATION",
		Short: "Change a service's replay horizon (admin token)",
		Long: `Change a service's replay horizon. DURATION uses Go syntax (336h, 90m,
1h30m). A horizon under the service's min_horizon is refused (exit code 4)
unless --force is given. The change is persisted and audited with the
token's name.`,
		Example: "  platformctl horizon set stock 336h\n  platformctl horizon set stock 12h --force",
		Args:    cobra.ExactArgs(2),
		RunE: call(a, adminv1.AdminServiceClient.SetHorizon,
			func(args []string) (*adminv1.SetHorizonRequest, error) {
				d, err := time.ParseDuration(args[1])
				if err != nil {
					return nil, invalidf("horizon %q: %v", args[1], err)
				}
				return &adminv1.SetHorizonRequest{Service: args[0], Horizon: durationpb.New(d), Force: force}, nil
			},
			func(w io.Writer, resp *adminv1.SetHorizonResponse) { horizonTable(w, resp.GetHorizon()) }),
	}
	set.Flags().BoolVar(&force, "force", false, "accept a horizon under the service's min_horizon")
	return group(cmd, get, set, newHorizonAdviseCmd(a))
}

// newPurgeCmd returns "platformctl purge" and its subcommands.
func newPurgeCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "purge",
		Short:   "Run a purge now or list past purge runs",
		Example: "  platformctl purge run stock --dry-run\n  platformctl purge list stock",
	}

	var dryRun bool
	runCmd := &cobra.Command{
		Use:     "run SERVICE",
		Short:   "Purge a service's processed events older than its horizon, now (admin token)",
		Example: "  platformctl purge run stock --dry-run\n  platformctl purge run stock",
		Args:    cobra.ExactArgs(1),
		RunE: call(a, adminv1.AdminServiceClient.RunPurge,
			func(args []string) (*adminv1.RunPurgeRequest, error) {
				return &adminv1.RunPurgeRequest{Service: args[0], DryRun: dryRun}, nil
			},
			func(w io.Writer, resp *adminv1.RunPurgeResponse) {
				purgeRunsTable(w, []*adminv1.PurgeRun{resp.GetRun()})
			}),
	}
	runCmd.Flags().BoolVar(&dryRun, "dry-run", false, "only count the rows that would be deleted")

	list := listCmd(a, &cobra.Command{
		Use:     "list SERVICE",
		Short:   "List a service's recent purge runs, newest first",
		Example: "  platformctl purge list stock\n  platformctl purge list stock --limit 10 -o json",
	}, "runs", adminv1.AdminServiceClient.ListPurgeRuns,
		func(name string, limit int32) *adminv1.ListPurgeRunsRequest {
			return &adminv1.ListPurgeRunsRequest{Service: name, Limit: limit}
		},
		func(w io.Writer, resp *adminv1.ListPurgeRunsResponse) { purgeRunsTable(w, resp.GetRuns()) })
	return group(cmd, runCmd, list)
}

// newFailedCmd returns "platformctl failed" and its subcommands.
func newFailedCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "failed",
		Short:   "List or retry the messages of a pool's failure queue",
		Example: "  platformctl failed list stock-events\n  platformctl failed retry stock-events --all",
	}

	list := listCmd(a, &cobra.Command{
		Use:     "list POOL",
		Short:   "List a pool's failures still failed, newest first (see also: failures list)",
		Example: "  platformctl failed list stock-events\n  platformctl failed list stock-events --limit 10 -o json",
	}, "messages", adminv1.AdminServiceClient.ListFailedMessages,
		func(name string, limit int32) *adminv1.ListFailedMessagesRequest {
			return &adminv1.ListFailedMessagesRequest{Pool: name, Limit: limit}
		},
		func(w io.Writer, resp *adminv1.ListFailedMessagesResponse) { failedTable(w, resp.GetMessages()) })

	var all, override bool
	retry := &cobra.Command{
		Use:   "retry POOL (EVENT_ID... | --all)",
		Short: "Move failed messages back to the pool's queue (admin token)",
		Long: `Move failed messages back to the pool's queue with their attempt count reset:
those with the given event ids, or every one with --all. Messages quarantined
as beyond_horizon are quarantined again unless --override-beyond-horizon says
the operator knows they were never applied.`,
		Example: "  platformctl failed retry stock-events 9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d\n  platformctl failed retry stock-events --all",
		Args:    cobra.MinimumNArgs(1),
		RunE: call(a, adminv1.AdminServiceClient.RetryFailedMessages,
			func(args []string) (*adminv1.RetryFailedMessagesRequest, error) {
				pool, ids := args[0], args[1:]
				switch {
				case all && len(ids) > 0:
					return nil, usagef("give either EVENT_IDs or --all, not both")
				case !all && len(ids) == 0:
					return nil, usagef("give EVENT_IDs or --all")
				}
				return &adminv1.RetryFailedMessagesRequest{Pool: pool, EventIds: ids, All: all, OverrideBeyondHorizon: override}, nil
			},
			func(w io.Writer, resp *adminv1.RetryFailedMessagesResponse) {
				row(w, "RETRIED")
				row(w, fmt.Sprint(resp.GetRetried()))
			}),
	}
	retry.Flags().BoolVar(&all, "all", false, "retry every message of the failure queue")
	retry.Flags().BoolVar(&override, "override-beyond-horizon", false, "let the copies through the beyond-horizon guard")
	return group(cmd, list, retry)
}

// newReloadCmd returns "platformctl reload".
func newReloadCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "reload",
		Short: "Re-read the daemon's config file and apply the difference (admin token)",
		Long: `Make the daemon read its config file again and apply the difference, as
SIGHUP does: new services and pools start, removed ones drain and stop,
changed pools restart alone, unchanged ones are not touched. A config with
mistakes changes nothing; every mistake is printed with its key path.`,
		Example: "  platformctl reload\n  platformctl reload -o json",
		Args:    cobra.NoArgs,
		RunE: call(a, adminv1.AdminServiceClient.ReloadConfig,
			func([]string) (*adminv1.ReloadConfigRequest, error) {
				return &adminv1.ReloadConfigRequest{}, nil
			},
			func(w io.Writer, resp *adminv1.ReloadConfigResponse) {
				row(w, "CHANGE", "NAMES")
				for _, r := range []struct {
					what  string
					names []string
				}{
					{"services added", resp.GetServicesAdded()}, {"services removed", resp.GetServicesRemoved()},
					{"services restarted", resp.GetServicesRestarted()}, {"pools added", resp.GetPoolsAdded()},
					{"pools removed", resp.GetPoolsRemoved()}, {"pools restarted", resp.GetPoolsRestarted()},
					{"services resized", resp.GetServicesResized()}, {"pools resized", resp.GetPoolsResized()},
					{"pools unchanged", resp.GetPoolsUnchanged()},
				} {
					if len(r.names) > 0 {
						row(w, r.what, strings.Join(r.names, ", "))
					}
				}
			}),
	}
}

// listCmd completes cmd as a listing of one service's or pool's items
// (runs, messages, replays): it takes that name as its one argument, has
// the --limit flag every listing of the admin API has, and calls rpc with
// the request that request builds. items names the items in the flag's
// help.
func listCmd[Req, Resp proto.Message](
	a *app,
	cmd *cobra.Command,
	items string,
	rpc func(adminv1.AdminServiceClient, context.Context, Req, ...grpc.CallOption) (Resp, error),
	request func(name string, limit int32) Req,
	table func(w io.Writer, resp Resp),
) *cobra.Command {
	var limit int32
	cmd.Args = cobra.ExactArgs(1)
	cmd.RunE = call(a, rpc, func(args []string) (Req, error) { return request(args[0], limit), nil }, table)
	cmd.Flags().Int32Var(&limit, "limit", 0, "at most this many "+items+", up to 10000 (0: the server's default, 100)")
	return cmd
}
