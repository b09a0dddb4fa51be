"""Instructor machinery: notebook generator, chapter export, nbval plugin.

Students never import this package and Colab never needs it; ``course_utils`` must not
import it (a test enforces that).
"""
