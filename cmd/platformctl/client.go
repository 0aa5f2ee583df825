package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// app holds the global flags and the process's environment and output.
type app struct {
	getenv func(string) string
	stdout io.Writer

	addr       string
	token      string
	tls        bool
	caFile     string
	certFile   string
	keyFile    string
	serverName string
	timeout    time.Duration
	output     string
}

// checkFlags validates the global flags and applies the environment.
func (a *app) checkFlags() error {
	if a.output != "table" && a.output != "json" {
		return usagef("-o %q: want table or json", a.output)
	}
	if a.timeout <= 0 {
		return usagef("--timeout %v: must be positive", a.timeout)
	}
	if (a.certFile == "") != (a.keyFile == "") {
		return usagef("--cert-file and --key-file go together")
	}
	if a.addr == "" {
		a.addr = a.getenv(envAddr)
	}
	if a.addr == "" {
		a.addr = addrDefault
	}
	if a.token == "" {
		a.token = a.getenv(envToken)
	}
	return nil
}

// dial returns a client connection to the daemon. grpc.NewClient connects
// lazily: connection errors surface on the first call, as codes.Unavailable.
func (a *app) dial() (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if a.tls || a.caFile != "" || a.certFile != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: a.serverName}
		if a.caFile != "" {
			pem, err := os.ReadFile(a.caFile)
			if err != nil {
				return nil, fmt.Errorf("error reading --ca-file: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("no PEM certificate in --ca-file %s", a.caFile)
			}
		}
		if a.certFile != "" {
			cert, err := tls.LoadX509KeyPair(a.certFile, a.keyFile)
			if err != nil {
				return nil, fmt.Errorf("error loading --cert-file and --key-file: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(a.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("error connecting to %s: %w", a.addr, err)
	}
	return conn, nil
}

// invoke calls rpc on the daemon with the token and timeout, then prints
// its response as JSON or, through table, as a table.
func invoke[T proto.Message](ctx context.Context, a *app, rpc func(context.Context, adminv1.AdminServiceClient) (T, error), table func(w io.Writer, resp T)) error {
	conn, err := a.dial()
	if err != nil {
		return err
	}
	defer conn.Close()

	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	if a.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+a.token)
	}
	resp, err := rpc(ctx, adminv1.NewAdminServiceClient(conn))
	if err != nil {
		return err
	}

	if a.output == "json" {
		// protojson's own indentation varies on purpose between builds;
		// json.Indent gives a stable layout with the same content.
		b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(resp)
		if err != nil {
			return fmt.Errorf("error encoding the response: %w", err)
		}
		var out bytes.Buffer
		if err := json.Indent(&out, b, "", "  "); err != nil {
			return fmt.Errorf("error encoding the response: %w", err)
		}
		out.WriteByte('\n')
		if _, err := out.WriteTo(a.stdout); err != nil {
			return fmt.Errorf("error writing output: %w", err)
		}
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	table(tw, resp)
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("error writing output: %w", err)
	}
	return nil
}

// call returns the RunE of a command that makes one call: request builds
// the call's request from the command's arguments (and the flags it closes
// over), rpc is the AdminServiceClient method (a method expression, such as
// adminv1.AdminServiceClient.ListPools), and table prints the response.
// An error of request is returned before anything is dialled.
func call[Req, Resp proto.Message](
	a *app,
	rpc func(adminv1.AdminServiceClient, context.Context, Req, ...grpc.CallOption) (Resp, error),
	request func(args []string) (Req, error),
	table func(w io.Writer, resp Resp),
) func(*cobra.Command, []string) error {
	return runE(func(cmd *cobra.Command, args []string) error {
		req, err := request(args)
		if err != nil {
			return err
		}
		return invoke(cmd.Context(), a,
			func(ctx context.Context, c adminv1.AdminServiceClient) (Resp, error) { return rpc(c, ctx, req) },
			table)
	})
}
