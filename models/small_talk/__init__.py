"""The small-talk detector (detector.py) and its shipped folders (detectors/)."""
