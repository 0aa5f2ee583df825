// Package adminv1 holds the Go code generated from
// api/proto/platform/admin/v1/admin.proto: the messages and the gRPC client
// and server of platform.admin.v1.AdminService. Regenerate it with buf
// generate (see buf.gen.yaml); only this file is written by hand.
package adminv1
