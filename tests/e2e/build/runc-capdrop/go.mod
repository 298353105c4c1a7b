module tether.local/e2e/runc-capdrop

go 1.26.0
