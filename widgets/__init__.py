from widgets.app import Workbench

__all__ = ['Workbench']
