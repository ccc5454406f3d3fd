package access_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/rtserver/rtserver/access"
)

// Private user topics, a room namespace decided by the application's own
// grant, and read-only news; everything else needs a user.
func Example() {
	members := map[string]bool{"alice/7": true}
	c, err := access.New(access.Config{
		Namespaces: []access.Namespace{
			{Pattern: "user:{user}", Rule: access.Rule{Subscribe: []string{"owner"}}},
			{Pattern: "user:*"}, // other users' topics: nobody
			{Pattern: "room:*", Rule: access.Rule{Subscribe: []string{"member"}, Publish: []string{"member"}}},
			{Pattern: "news:*", Rule: access.Rule{Subscribe: []string{"any"}}},
		},
		Default: &access.Rule{Subscribe: []string{"authenticated"}, Publish: []string{"authenticated"}},
	}, access.Deps{Grants: map[string]access.GrantFunc{
		"member": func(_ context.Context, q access.Question) (bool, error) {
			return members[q.User+"/"+strings.TrimPrefix(q.Topic, "room:")], nil
		},
	}})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, q := range []access.Question{
		{Action: access.Subscribe, Topic: "user:alice", User: "alice"},
		{Action: access.Subscribe, Topic: "user:alice", User: "bob"},
		{Action: access.Publish, Topic: "room:7", User: "alice"},
		{Action: access.Publish, Topic: "room:7", User: "bob"},
		{Action: access.Subscribe, Topic: "news:today"},
		{Action: access.Publish, Topic: "news:today", User: "alice"},
		{Action: access.Publish, Topic: "misc", User: "bob"},
		{Action: access.Subscribe, Topic: "__system", User: "alice"},
	} {
		fmt.Printf("%-9s %-10s by %-7s: %v\n", q.Action, q.Topic, fmt.Sprintf("%q", q.User), c.Check(ctx, q))
	}
	// Output:
	// subscribe user:alice by "alice": allow
	// subscribe user:alice by "bob"  : deny
	// publish   room:7     by "alice": allow
	// publish   room:7     by "bob"  : deny
	// subscribe news:today by ""     : allow
	// publish   news:today by "alice": deny
	// publish   misc       by "bob"  : allow
	// subscribe __system   by "alice": deny
}

// Configuration errors name the key, as the standalone binary reports them.
func ExampleConfig_Validate() {
	err := (access.Config{Namespaces: []access.Namespace{
		{Pattern: "chat:*", Rule: access.Rule{Subscribe: []string{"owner"}}},
		{Pattern: "chat:[", Rule: access.Rule{Publish: []string{"everyone"}}},
	}}).Validate()
	fmt.Println(err)
	// Output:
	// topics.namespaces[0].subscribe[0]: owner needs a namespace pattern holding {user}
	// topics.namespaces[1].pattern: bad glob (path.Match syntax): "chat:["
	// topics.namespaces[1].publish[0]: unknown grant "everyone" (want any, authenticated, owner, claim, proxy, or a grant registered by the application)
}
