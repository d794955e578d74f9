module lagc

go 1.26.8

require (
	github.com/ardanlabs/jinja v1.8.0 // indirect
	github.com/chzyer/readline v1.5.1 // indirect
	github.com/dlclark/regexp2/v2 v2.13.0 // indirect
	github.com/ebitengine/purego v0.11.3 // indirect
	github.com/google/pprof v0.0.0-20261105003125-4bf881d7fb0b // indirect
	github.com/ianlancetaylor/demangle v0.0.0-20250417193237-f615e6bd150b // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sys v0.50.0 // indirect
	gonum.org/v1/gonum v0.17.0 // indirect
)
