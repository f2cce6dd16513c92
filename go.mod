module github.com/lmwarden/warden

go 1.26.8

require (
	github.com/NVIDIA/go-nvml v0.13.4-1 // GPU discovery (NVML); mocks for tests
	github.com/dustin/go-humanize v1.1.0 // memory sizes: --cpu-kv-cache parsing, byte formatting
	github.com/go-zeromq/zmq4 v0.17.0 // KV-cache events: ZMQ PUB/SUB and replay ROUTER/DEALER in pure Go (no libzmq, no cgo)
	github.com/google/go-cmp v0.7.0 // cmp.Diff in table tests
	github.com/jedib0t/go-pretty/v6 v6.8.3 // terminal tables: status, gpus, summary
	github.com/prometheus/client_golang v1.25.0 // /metrics of the warden and the simulator
	github.com/prometheus/client_model v0.6.3 // metric families from expfmt
	github.com/prometheus/common v0.73.1 // expfmt: parsing engines' Prometheus text
	github.com/schollz/progressbar/v3 v3.19.1 // bench progress bars
	github.com/shirou/gopsutil/v4 v4.26.10 // engine process trees; v4 reads /proc (v3 needs pgrep)
	github.com/tidwall/gjson v1.20.2 // path lookups in request bodies without unmarshalling
	github.com/tidwall/sjson v1.2.9 // surgical request body edits
	github.com/urfave/cli/v2 v2.27.7 // command tree, flags with WARDEN_* env vars
	github.com/vmihailenco/msgpack/v5 v5.4.1 // KV-cache events: msgpack payloads byte-compatible with vLLM's msgspec
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // "did you mean" for misspelt commands and flags (urfave/cli's measure)
	go.uber.org/goleak v1.3.0 // goroutine-leak checks in tests
	golang.org/x/sys v0.50.0 // CPU affinity of CPU engines (sched_setaffinity)
	golang.org/x/term v0.47.0 // terminal detection for live displays
	gopkg.in/natefinch/lumberjack.v2 v2.2.1 // size-rotated --decision-log file
)

require (
	github.com/envoyproxy/go-control-plane/envoy v1.40.0
	github.com/fsnotify/fsnotify v1.10.1
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3
	go.yaml.in/yaml/v3 v3.0.6
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/cncf/xds/go v0.0.0-20260202195803-dba9d589def2 // indirect
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/ebitengine/purego v0.11.2 // indirect
	github.com/envoyproxy/protoc-gen-validate v1.3.3 // indirect
	github.com/go-ole/go-ole v1.2.6 // indirect
	github.com/go-zeromq/goczmq/v4 v4.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/lufia/plan9stats v0.0.0-20211012122336-39d0f177ccd0 // indirect
	github.com/mattn/go-runewidth v0.0.16 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pandatix/go-abnf v0.5.3 // indirect
	github.com/planetscale/vtprotobuf v0.6.1-0.20240319094008-0393e58bdf10 // indirect
	github.com/power-devops/perfstat v0.0.0-20260805114148-88456608a4f6 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.3.0 // indirect
	github.com/tklauser/go-sysconf v0.4.0 // indirect
	github.com/tklauser/numcpus v0.12.0 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	github.com/yusufpapurcu/wmi v1.2.4 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
)
