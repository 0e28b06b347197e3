module github.com/lameduck/lameduck/cmd/lameduck

go 1.26

require (
	github.com/coder/websocket v1.8.14
	github.com/lameduck/lameduck v0.0.0
	github.com/spf13/cobra v1.10.2
	go.uber.org/goleak v1.3.0
	golang.org/x/net v0.50.0
	golang.org/x/sys v0.41.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/text v0.34.0 // indirect
)

replace github.com/lameduck/lameduck => ../..
