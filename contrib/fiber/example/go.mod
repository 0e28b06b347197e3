module github.com/lameduck/lameduck/contrib/fiber/example

go 1.26.0

replace (
	github.com/lameduck/lameduck => ../../..
	github.com/lameduck/lameduck/contrib/fiber => ..
)

require (
	github.com/gofiber/fiber/v2 v2.52.15
	github.com/jackc/pgx/v5 v5.12.0
	github.com/lameduck/lameduck v0.0.0
	github.com/lameduck/lameduck/contrib/fiber v0.0.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/lameduck/lameduck/contrib/fasthttp v0.0.0 // indirect
	github.com/lameduck/lameduck/contrib/internal/fasthttptest v0.0.0 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/mattn/go-runewidth v0.0.16 // indirect
	github.com/molecule-man/go-brrr v1.3.1 // indirect
	github.com/rivo/uniseg v0.2.0 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasthttp v1.78.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

replace github.com/lameduck/lameduck/contrib/fasthttp => ../../fasthttp

replace github.com/lameduck/lameduck/contrib/internal/fasthttptest => ../../internal/fasthttptest
