// Foundation's file-coordination names, for code written against Apple's platforms: each is
// unavailable and renamed, so the compiler offers Concord's name as a fix-it. (Linux Foundation
// declares none of them, so they never clash with Foundation's.)

/// Foundation's name for ``FileCoordinator``.
@available(*, unavailable, renamed: "FileCoordinator")
public typealias NSFileCoordinator = FileCoordinator

/// Foundation's name for ``FilePresenter``.
@available(*, unavailable, renamed: "FilePresenter")
public typealias NSFilePresenter = FilePresenter

/// Foundation's name for ``FileAccessIntent``.
@available(*, unavailable, renamed: "FileAccessIntent")
public typealias NSFileAccessIntent = FileAccessIntent

/// Foundation's name for ``FileVersion``.
@available(*, unavailable, renamed: "FileVersion")
public typealias NSFileVersion = FileVersion
