"""Cell texts of the workshop notebooks, one module per notebook; ``notebooks/_build.py`` writes them."""
