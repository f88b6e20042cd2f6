import os
import sys

# Tests import shared helpers as a module.
sys.path.insert(0, os.path.dirname(__file__))
