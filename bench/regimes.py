"""The rows of BENCHMARKS.md's headline table, read from rtbench's JSON
reports: bench/*/compare.sh print them with scripts/benchtable.py's
table(). Each regime's rows are (label, getter[, better]) as table()
takes them."""

ROWS = {
    "fan1000": [("1 -> 1,000, 64 in flight: server CPU s per million delivered", lambda j: j["serverCpuSecondsPerMillionDelivered"]),
                ("1 -> 1,000, 64 in flight: delivered/s", lambda j: j["deliveredPerSec"], "higher")],
    "window1": [("1 -> 1,000, one at a time: server CPU s per million", lambda j: j["serverCpuSecondsPerMillionDelivered"]),
                ("1 -> 1,000, one at a time: latency p50 ms", lambda j: j["latency"]["p50Ms"]),
                ("1 -> 1,000, one at a time: latency p99 ms", lambda j: j["latency"]["p99Ms"])],
    "rooms": [("100 x 10, a publisher per topic, 64 in flight: server CPU s per million", lambda j: j["serverCpuSecondsPerMillionDelivered"]),
              ("100 x 10, a publisher per topic, 64 in flight: delivered/s", lambda j: j["deliveredPerSec"], "higher")],
    "sparse": [("100 x 10 sparse (20 msg/s per publisher): server CPU s per million", lambda j: j["serverCpuSecondsPerMillionDelivered"]),
               ("100 x 10 sparse: latency p50 ms", lambda j: j["latency"]["p50Ms"]),
               ("100 x 10 sparse: latency p99 ms", lambda j: j["latency"]["p99Ms"])],
    "idle": [("idle at 10k: KiB RSS per connection", lambda j: j["serverRssPerConnBytes"] / 1024),
             ("idle at 10k: goroutines per connection (Go servers only)", lambda j: j["serverGoroutinesPerConn"], None)],
    "connect": [("connect flood, 10,000 attempts at a cap of 21: server CPU us per shed attempt", lambda j: j["serverCpuUsPerShed"]),
                ("connect flood: attempts shed", lambda j: j["shed"], None)],
}
