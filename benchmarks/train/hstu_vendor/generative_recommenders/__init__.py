# Vendored subset of meta-recsys/generative-recommenders (Apache-2.0, ../LICENSE); see ../VENDORED.md.
