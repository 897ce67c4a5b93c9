"""Keep hypothesis's working files (its example database is off; it still caches source
constants) out of the repository: they go to a directory under the system temp dir."""
import os
import tempfile

from hypothesis import configuration

configuration.set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "gxusim-fuzz-hypothesis"))
