"""Adapters that give other projects' NUMA helpers numabind's in-process binding."""
