import Foundation

/// One item a coordination reads or writes, for ``FileCoordinator/coordinate(with:byAccessor:)-7stxu``
/// and its async form: the counterpart of `NSFileAccessIntent`.
public struct FileAccessIntent: Sendable, Hashable {
    /// How the item is accessed.
    public enum Access: Sendable, Hashable {
        /// A coordinated read with these options.
        case reading(FileCoordinator.ReadingOptions)
        /// A coordinated write with these options.
        case writing(FileCoordinator.WritingOptions)
    }

    /// The item.
    public var url: URL
    /// Reading or writing, with its options.
    public var access: Access

    /// An intent to read `url`.
    public static func readingIntent(with url: URL, options: FileCoordinator.ReadingOptions = []) -> FileAccessIntent {
        FileAccessIntent(url: url, access: .reading(options))
    }

    /// An intent to write `url`.
    public static func writingIntent(with url: URL, options: FileCoordinator.WritingOptions = []) -> FileAccessIntent {
        FileAccessIntent(url: url, access: .writing(options))
    }

    var isWriting: Bool {
        if case .writing = access { return true }
        return false
    }

    var writingOptions: FileCoordinator.WritingOptions {
        if case .writing(let options) = access { return options }
        return []
    }

    var readingOptions: FileCoordinator.ReadingOptions {
        if case .reading(let options) = access { return options }
        return []
    }

    /// Whether this access covers everything inside a directory, as deleting, moving and
    /// replacing do.
    var coversContents: Bool {
        !writingOptions.isDisjoint(with: [.forDeleting, .forMoving, .forReplacing])
    }
}
