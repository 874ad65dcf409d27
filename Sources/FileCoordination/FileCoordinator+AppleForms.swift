import Foundation

// Apple's spellings that Concord answers differently. Each is unavailable, so code written
// against `NSFileCoordinator` stops at compile time with a message naming Concord's form,
// instead of failing to type-check with no useful diagnostic.

extension FileCoordinator {
    /// Apple's error-pointer form. Concord's `coordinate` throws instead.
    @available(
        *,
        unavailable,
        message:
            "Concord's coordinate throws instead of filling an error pointer: use 'try coordinator.coordinate(readingItemAt:options:byAccessor:)'"
    )
    public func coordinate(
        readingItemAt url: URL,
        options: ReadingOptions = [],
        error outError: UnsafeMutablePointer<NSError?>?,
        byAccessor reader: (URL) -> Void
    ) { fatalError("unavailable") }

    /// Apple's error-pointer form. Concord's `coordinate` throws instead.
    @available(
        *,
        unavailable,
        message:
            "Concord's coordinate throws instead of filling an error pointer: use 'try coordinator.coordinate(writingItemAt:options:byAccessor:)'"
    )
    public func coordinate(
        writingItemAt url: URL,
        options: WritingOptions = [],
        error outError: UnsafeMutablePointer<NSError?>?,
        byAccessor writer: (URL) -> Void
    ) { fatalError("unavailable") }

    /// Apple's error-pointer form. Concord's `coordinate` throws instead.
    @available(
        *,
        unavailable,
        message:
            "Concord's coordinate throws instead of filling an error pointer: use 'try coordinator.coordinate(readingItemAt:options:writingItemAt:options:byAccessor:)'"
    )
    public func coordinate(
        readingItemAt readingURL: URL,
        options readingOptions: ReadingOptions = [],
        writingItemAt writingURL: URL,
        options writingOptions: WritingOptions = [],
        error outError: UnsafeMutablePointer<NSError?>?,
        byAccessor readerWriter: (URL, URL) -> Void
    ) { fatalError("unavailable") }

    /// Apple's error-pointer form. Concord's `coordinate` throws instead.
    @available(
        *,
        unavailable,
        message:
            "Concord's coordinate throws instead of filling an error pointer: use 'try coordinator.coordinate(writingItemAt:options:writingItemAt:options:byAccessor:)'"
    )
    public func coordinate(
        writingItemAt url1: URL,
        options options1: WritingOptions = [],
        writingItemAt url2: URL,
        options options2: WritingOptions = [],
        error outError: UnsafeMutablePointer<NSError?>?,
        byAccessor writer: (URL, URL) -> Void
    ) { fatalError("unavailable") }

    /// Apple's queue form. Concord's has a blocking and an `async` form instead.
    @available(
        *,
        unavailable,
        message:
            "Concord takes no OperationQueue: use 'try await coordinator.coordinate(with:byAccessor:)' (or the blocking form), whose accessor gets the URLs and may throw"
    )
    public func coordinate(
        with intents: [FileAccessIntent],
        queue: OperationQueue,
        byAccessor accessor: @escaping ((any Error)?) -> Void
    ) { fatalError("unavailable") }

    /// Apple's batch preparation. Concord has no counterpart.
    @available(
        *,
        unavailable,
        message:
            "Concord has no batch preparation: coordinate all the items at once with 'try coordinator.coordinate(with: intents) { urls in ... }'"
    )
    public func prepareForReadingItems(
        at readingURLs: [URL],
        options readingOptions: ReadingOptions = [],
        writingItemsAt writingURLs: [URL],
        options writingOptions: WritingOptions = [],
        error outError: UnsafeMutablePointer<NSError?>?,
        byAccessor batchAccessor: (@escaping () -> Void) -> Void
    ) { fatalError("unavailable") }
}
