// Command rtserver is the standalone rtserver: a WebSocket realtime server
// with two-tier admission control, configured by a YAML file, RTSERVER_*
// environment variables and flags (in that order of precedence).
//
//	rtserver                      # single instance, in-memory bus, 127.0.0.1:8080
//	rtserver --config rt.yaml     # see docs/configuration.md
//	rtserver --print-config       # the effective configuration
//
// SIGTERM or SIGINT drains (readiness 503, clients told and closed with
// 1012 spread over drain.duration) and exits 0; a second signal closes the
// remaining connections at once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/handshake"
	"github.com/rtserver/rtserver/message"
	"github.com/rtserver/rtserver/pressure"
	"github.com/rtserver/rtserver/rpcproxy"
	"github.com/rtserver/rtserver/server"
)

func main() {
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

func run(args, environ []string, stdout, stderr io.Writer) int {
	cfg, action, err := Load(args, environ)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	switch action {
	case ActionPrintConfig:
		out, err := cfg.YAML()
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		stdout.Write(out)
		return 0
	case ActionPrintReference:
		stdout.Write(ConfigReference())
		return 0
	}

	log := newLogger(cfg.Log, stderr)
	nodeCfg, err := nodeConfig(cfg, log)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	processWide(&nodeCfg, log)
	node, err := rtserver.New(nodeCfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}

	// First signal: drain. Second: close what is left at once.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	ctx, stop := context.WithCancel(context.Background())
	hard := make(chan struct{})
	go func() {
		<-sigs
		log.Info("signal: draining; send again to stop at once")
		stop()
		<-sigs
		close(hard)
	}()
	if err := node.Run(ctx, hard); err != nil {
		log.Error("rtserver stopped", "err", err)
		return 1
	}
	return 0
}

func newLogger(c LogConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// nodeConfig maps the validated file/env/flag configuration onto the
// library's types. Validate has already checked every value; errors here
// are I/O (the public key file).
func nodeConfig(c Config, log *slog.Logger) (rtserver.Config, error) {
	n := rtserver.DefaultConfig()
	n.Listen = c.Listen
	n.AdminListen = c.AdminListen
	n.HTTP = rtserver.HTTPTimeouts{
		ReadHeaderTimeout: time.Duration(c.HTTP.ReadHeaderTimeout),
		ReadTimeout:       time.Duration(c.HTTP.ReadTimeout),
		IdleTimeout:       time.Duration(c.HTTP.IdleTimeout),
	}
	n.Logger = log
	n.MetricsNamespace = c.Metrics.Namespace
	n.DrainDuration = time.Duration(c.Drain.Duration)
	n.APIKey = c.API.Key

	h := c.Handshake
	hc := handshake.DefaultConfig()
	hc.MaxConnections = h.MaxConnections
	hc.MaxConcurrent = h.MaxConcurrent
	hc.PerTickBudget = h.PerTickBudget
	hc.Tick = time.Duration(h.Tick)
	hc.MaxQueueWait = time.Duration(h.MaxQueueWait)
	hc.Reject = handshake.RejectHTTP
	if h.Reject == "close" {
		hc.Reject = handshake.RejectClose
	}
	hc.RetryAfter = time.Duration(h.RetryAfter)
	hc.PerIPLimit = h.PerIP.Limit
	hc.PerIPPer = time.Duration(h.PerIP.Per)
	for _, p := range h.TrustedProxies {
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			return n, fmt.Errorf("config: handshake.trustedProxies: %w", err)
		}
		hc.TrustedProxies = append(hc.TrustedProxies, pfx)
	}
	hc.AllowedOrigins = h.AllowedOrigins
	hc.AllowNoOrigin = h.AllowNoOrigin
	hc.JWTHMACSecret = []byte(c.Auth.JWT.HMACSecret)
	if f := c.Auth.JWT.PublicKeyFile; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return n, fmt.Errorf("config: auth.jwt.publicKeyFile: %w", err)
		}
		hc.JWTPublicKey = pem
	}
	hc.JWKSURL = c.Auth.JWT.JWKSURL
	hc.JWTAudience = c.Auth.JWT.Audience
	hc.JWTIssuer = c.Auth.JWT.Issuer
	n.Handshake = hc
	n.Topics = c.Topics.accessConfig()

	n.Limits = server.Config{
		MaxMessageBytes:         c.Limits.MaxMessageBytes,
		MaxSubscriptionsPerConn: c.Limits.MaxSubscriptionsPerConn,
		SendQueueBytes:          int(c.Limits.SendQueueBytes),
		WriteTimeout:            time.Duration(c.Limits.WriteTimeout),
		PingInterval:            time.Duration(c.Limits.PingInterval),
		RefreshNotice:           time.Duration(c.Auth.JWT.RefreshNotice),
	}

	p := c.Pressure
	n.Pressure = pressure.Config{
		SampleInterval:          time.Duration(p.SampleInterval),
		MemoryHeapUsedRatio:     p.MemoryHeapUsedRatio,
		MemoryLimitBytes:        uint64(p.MemoryLimitBytes),
		PublishRatePerSec:       p.PublishRatePerSec,
		SubscriberRatio:         p.SubscriberRatio,
		TopicPublishRatePerSec:  p.TopicPublishRatePerSec,
		TopicPublishBytesPerSec: p.TopicPublishBytesPerSec,
		TopN:                    p.TopN,
	}

	fp, err := message.ParseFailPolicy(c.Admission.FailPolicy)
	if err != nil {
		return n, fmt.Errorf("config: admission.failPolicy: %w", err)
	}
	n.FailPolicy = fp
	n.Methods = c.Admission.Methods
	n.Classes = map[string]message.Rule{}
	for name, cr := range c.Admission.Classes {
		var r message.Rule
		reasons, err := message.ParseReasons(cr.Reasons)
		if err != nil {
			return n, fmt.Errorf("config: admission.classes.%s.reasons: %w", name, err)
		}
		r.Reasons = reasons
		if t := cr.ClusterTopPublisher; t != nil {
			r.ClusterTopPublisher = &message.ClusterTopPublisher{Threshold: t.Threshold, By: t.By}
		}
		if rr := cr.Rate; rr != nil {
			r.Rate = &message.Rate{Limit: rr.Limit, Per: time.Duration(rr.Per), By: rr.By, Strategy: rr.Strategy, Scope: rr.Scope}
		}
		if cr := cr.Cost; cr != nil {
			r.Cost = &message.Cost{Budget: cr.Budget, Per: time.Duration(cr.Per), Of: cr.Of, By: cr.By, Scope: cr.Scope}
		}
		if ac := cr.AdaptiveConcurrency; ac != nil {
			r.AdaptiveConcurrency = &message.AdaptiveConcurrency{Min: ac.Min, Max: ac.Max}
		}
		if cc := cr.Concurrency; cc != nil {
			r.Concurrency = &message.Concurrency{Max: cc.Max}
		}
		n.Classes[name] = r
	}

	n.RPCProxy = rpcproxy.Options{URL: c.RPC.Proxy.URL, Timeout: time.Duration(c.RPC.Proxy.Timeout)}

	n.Redis = rtserver.Redis{
		URL:           c.Redis.URL,
		Bus:           c.Redis.Bus,
		Partitions:    c.Redis.Partitions,
		ChannelPrefix: c.Redis.ChannelPrefix,

		RateChannel:         c.PublishRate.Channel,
		RatePublishInterval: time.Duration(c.PublishRate.PublishInterval),
		RateStaleAfter:      time.Duration(c.PublishRate.StaleAfter),
		RateTopN:            c.PublishRate.TopN,
		RateMaxClockSkew:    time.Duration(c.PublishRate.MaxClockSkew),
		HMACSecret:          []byte(c.PublishRate.HMACSecret),
	}
	return n, nil
}
