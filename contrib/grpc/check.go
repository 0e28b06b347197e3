package ldgrpc

import (
	"context"
	"fmt"

	"github.com/lameduck/lameduck/health"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// HealthCheck returns spec with its Func set to a grpc.health.v1 Check of
// another service over cc: spec carries the name, Critical and Timeout
// (see health.Check), and any Func it holds is replaced. service is the
// name asked ("" for the server as a whole). It passes when the answer is
// SERVING.
//
// The call goes over cc, the client connection the application already
// holds (gRPC multiplexes it over its connections and redials them itself:
// no connection is dialled per probe), under the probe's context, so a
// server that never answers is reported "timeout" at the check's deadline.
//
// Errors begin "lameduck: grpc health " and name the service and the
// status (NOT_SERVING, SERVICE_UNKNOWN) or the RPC's error (codes.NotFound
// for a service the server does not know, codes.Unimplemented for a server
// without the health service, codes.Unavailable when it cannot be
// reached). A nil cc makes every call return an error saying so. Safe for
// concurrent use.
func HealthCheck(spec health.Check, cc grpc.ClientConnInterface, service string) health.Check {
	if cc == nil {
		err := fmt.Errorf("lameduck: ldgrpc.HealthCheck(%q): the client connection is nil; pass the *grpc.ClientConn the application uses", spec.Name)
		spec.Func = func(context.Context) error { return err }
		return spec
	}
	client := healthpb.NewHealthClient(cc)
	spec.Func = func(ctx context.Context) error {
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			return fmt.Errorf("lameduck: grpc health %q: %w", service, err)
		}
		if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("lameduck: grpc health %q: %s", service, st)
		}
		return nil
	}
	return spec
}
