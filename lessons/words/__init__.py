"""The words of each lesson, one module per concept: prose, objectives, prediction, takeaway,
checkpoint questions, instructor notes and quoted figures, as module-level constants.

A teacher reads and reviews a lesson here without reading Panel code: these modules import no
Panel, Bokeh or torch (only the plain shapes in widgets.content and lessons.teaching). The lesson
module beside them (lessons/<concept>.py) is the view that draws them.
"""
