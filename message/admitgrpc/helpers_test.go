package admitgrpc_test

import (
	"context"
	"net/netip"

	"google.golang.org/grpc/metadata"
)

func netipPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func metadataCtx(ctx context.Context, kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// userOf is a Key function: the caller's "x-user" metadata.
func userOf(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, "x-user"); len(v) > 0 {
		return v[0]
	}
	return ""
}
