from .system import ComplexSystem
from .update import NCAUpdate, Perceive
