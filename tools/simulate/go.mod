module github.com/borrowcycle/borrowcycle/tools/simulate

go 1.24

require (
	github.com/borrowcycle/borrowcycle v0.0.0-00010101000000-000000000000
	gonum.org/v1/plot v0.15.2
	gopkg.in/yaml.v3 v3.0.1
)

require (
	codeberg.org/go-fonts/liberation v0.4.1 // indirect
	codeberg.org/go-latex/latex v0.0.1 // indirect
	codeberg.org/go-pdf/fpdf v0.10.0 // indirect
	git.sr.ht/~sbinet/gg v0.6.0 // indirect
	github.com/ajstarks/svgo v0.0.0-20211024235047-1546f124cd8b // indirect
	github.com/campoy/embedmd v1.0.0 // indirect
	github.com/golang/freetype v0.0.0-20170609003504-e2365dfdc4a0 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	golang.org/x/image v0.27.0 // indirect
	golang.org/x/text v0.25.0 // indirect
)

// The simulator drives the engine of this repository, as it is.
replace github.com/borrowcycle/borrowcycle => ../..
