import ConcordSystem
import Foundation

/// One item of a coordination, resolved.
struct CoordinatedItem {
    var intent: FileAccessIntent
    /// The canonical path that names its locks and matches presenters.
    var path: String
    /// The URL the accessor gets.
    var accessorURL: URL
}

/// One lock a coordination takes.
struct LockRequest: Comparable {
    var name: LockName
    var mode: FileLockMode
    /// The index of the item whose access needs this lock, for error messages.
    var item: Int

    static func < (lhs: LockRequest, rhs: LockRequest) -> Bool { lhs.name < rhs.name }
    static func == (lhs: LockRequest, rhs: LockRequest) -> Bool { lhs.name == rhs.name && lhs.mode == rhs.mode }
}

/// Which locks a set of accesses takes, in the one global order that makes any number of
/// coordinations, over any number of items named in any order, free of deadlock.
///
/// Every path has two locks: its *item* lock (shared to read the item, exclusive to write it) and
/// its *tree* lock (shared by every access to something inside the directory, exclusive while the
/// directory itself is deleted, moved or replaced). A plain read or write of a directory therefore
/// waits for no one inside it, while deleting, moving or replacing it waits for, and then blocks,
/// every coordinated access inside it.
enum LockPlan {
    static func requests(for items: [CoordinatedItem]) -> [LockRequest] {
        var requests: [LockRequest] = []
        requests.reserveCapacity(items.count * 8)
        for (index, item) in items.enumerated() {
            let itemMode: FileLockMode = item.intent.isWriting ? .exclusive : .shared
            LockName.forEach(in: item.path, tree: item.intent.coversContents) { name, isAncestor in
                let mode: FileLockMode = isAncestor ? .shared : (name.kind == .item ? itemMode : .exclusive)
                // Few locks per coordination: a linear merge beats a dictionary.
                if let existing = requests.firstIndex(where: { $0.name == name }) {
                    if requests[existing].mode < mode { requests[existing].mode = mode }
                } else {
                    requests.append(LockRequest(name: name, mode: mode, item: index))
                }
            }
        }
        requests.sort()
        return requests
    }
}

/// How a registered presenter's item relates to a coordinated item.
enum PresenterRelation {
    /// The presenter presents the item itself.
    case item
    /// The presenter presents a directory that contains the item.
    case ancestor
    /// The presenter presents something inside the item (a directory).
    case descendant

    init?(presenterPath: String, itemPath: String) {
        // Paths compare byte for byte, as the kernel (and the lock names) see them.
        if presenterPath.utf8.elementsEqual(itemPath.utf8) {
            self = .item
        } else if CanonicalPath.isStrictlyInside(itemPath, presenterPath) {
            self = .ancestor
        } else if CanonicalPath.isStrictlyInside(presenterPath, itemPath) {
            self = .descendant
        } else {
            return nil
        }
    }
}

/// A relinquished presenter's way back to its item.
struct Reacquirer: Sendable {
    var queue: PresenterQueue
    var reacquire: @Sendable () -> Void
}

/// The presenters one coordination messages, and what it tells them before and after.
struct PresenterPlan {
    struct Target {
        var registration: PresenterRegistry.Registration
        var presenter: any FilePresenter
        var path: String
    }

    private let targets: [Target]

    init?(registry: PresenterRegistry, excluding excluded: ObjectIdentifier?, knownEmpty: Bool = false) {
        if knownEmpty || registry.isEmpty { return nil }
        targets = registry.snapshot().compactMap { registration in
            guard registration.identifier != excluded, let (presenter, path) = registration.canonicalPath() else {
                return nil
            }
            return Target(registration: registration, presenter: presenter, path: path)
        }
        if targets.isEmpty { return nil }
    }

    private struct Wrapped: Sendable { var reacquire: (@Sendable () -> Void)? }

    /// Asks presenters to save, accommodate deletions and relinquish, before any lock is taken.
    ///
    /// - Returns: the reacquirers to call once the access is over.
    /// - Throws: if a presenter vetoes, or the wait ends; the presenters already relinquished
    ///   get their items back first.
    func prepare(
        _ items: [CoordinatedItem],
        deadline: Deadline?,
        token: CoordinationToken
    ) throws(FileCoordinationError) -> [Reacquirer] {
        var reacquirers: [Reacquirer] = []
        do {
            for target in targets {
                var save = false
                var deleted = false
                var relinquishToWriter = false
                var relinquishToReader = false
                var subitemDeletions: [URL] = []
                for item in items {
                    guard let relation = PresenterRelation(presenterPath: target.path, itemPath: item.path) else {
                        continue
                    }
                    switch (relation, item.intent.access) {
                    case (.item, .reading(let options)), (.descendant, .reading(let options)):
                        if !options.contains(.withoutChanges) { save = true }
                        relinquishToReader = true
                    case (.item, .writing(let options)), (.descendant, .writing(let options)):
                        if relation == .descendant && !item.intent.coversContents { continue }
                        if options.contains(.forMerging) { save = true }
                        if options.contains(.forDeleting) { deleted = true } else { relinquishToWriter = true }
                    case (.ancestor, .writing(let options)):
                        if options.contains(.forDeleting) { subitemDeletions.append(item.accessorURL) }
                    case (.ancestor, .reading):
                        break
                    }
                }
                let presenter = target.presenter
                let queue = target.registration.queue
                if save {
                    try ask(target, deadline, token, "savePresentedItemChanges") {
                        presenter.savePresentedItemChanges(completionHandler: $0)
                    }
                }
                for url in subitemDeletions {
                    try ask(target, deadline, token, "accommodatePresentedSubitemDeletion(at:)") {
                        presenter.accommodatePresentedSubitemDeletion(at: url, completionHandler: $0)
                    }
                }
                if deleted {
                    try ask(target, deadline, token, "accommodatePresentedItemDeletion") {
                        presenter.accommodatePresentedItemDeletion(completionHandler: $0)
                    }
                }
                if relinquishToWriter || relinquishToReader {
                    let toWriter = relinquishToWriter
                    let (outcome, answer) = queue.request(
                        deadline: deadline,
                        token: token,
                        // A presenter that relinquishes after the coordination gave up still
                        // gets its item back.
                        late: { late in if let reacquire = late.reacquire { queue.post(reacquire) } }
                    ) {
                        (reply: @escaping @Sendable (Wrapped) -> Void) in
                        if toWriter {
                            presenter.relinquishPresentedItem(toWriter: { reply(Wrapped(reacquire: $0)) })
                        } else {
                            presenter.relinquishPresentedItem(toReader: { reply(Wrapped(reacquire: $0)) })
                        }
                    }
                    try check(
                        outcome,
                        target,
                        relinquishToWriter ? "relinquishPresentedItem(toWriter:)" : "relinquishPresentedItem(toReader:)"
                    )
                    if let reacquire = answer?.reacquire {
                        reacquirers.append(Reacquirer(queue: queue, reacquire: reacquire))
                    }
                }
            }
        } catch {
            Self.post(reacquirers)
            throw error
        }
        return reacquirers
    }

    private func ask(
        _ target: Target,
        _ deadline: Deadline?,
        _ token: CoordinationToken,
        _ hook: String,
        _ body: @escaping @Sendable (_ completionHandler: @escaping @Sendable ((any Error)?) -> Void) -> Void
    ) throws(FileCoordinationError) {
        // The hook's completion-handler form: its default calls the throwing form at once; a
        // presenter that implements it may answer later, from any thread.
        let (outcome, answer) = target.registration.queue.request(deadline: deadline, token: token) {
            (reply: @escaping @Sendable (Result<Void, any Error>) -> Void) in
            body { error in reply(error.map { .failure($0) } ?? .success(())) }
        }
        try check(outcome, target, hook)
        if case .failure(let error)? = answer {
            throw FileCoordinationError(
                code: .presenterFailed,
                url: target.presenter.presentedItemURL,
                message: "the presenter's \(hook) threw",
                underlyingError: error
            )
        }
    }

    private func check(_ outcome: WaitOutcome, _ target: Target, _ hook: String) throws(FileCoordinationError) {
        switch outcome {
        case .completed: return
        case .cancelled:
            throw FileCoordinationError(
                code: .cancelled,
                url: target.presenter.presentedItemURL,
                message: "cancelled while waiting for a presenter's \(hook)"
            )
        case .timedOut:
            throw FileCoordinationError(
                code: .timedOut,
                url: target.presenter.presentedItemURL,
                message: "timed out waiting for a presenter's \(hook)"
            )
        }
    }

    static func post(_ reacquirers: [Reacquirer]) {
        for reacquirer in reacquirers { reacquirer.queue.post(reacquirer.reacquire) }
    }

    /// What one written item looked like around the accessor.
    struct Outcome {
        var item: CoordinatedItem
        var existedBefore: Bool
        var existsAfter: Bool
    }

    /// Tells presenters what happened, after every lock is released: moves first, then changes,
    /// appearances and deletions.
    func finish(_ outcomes: [Outcome], moves: [(from: URL, fromPath: String, to: URL, toPath: String)]) {
        for target in targets {
            let presenter = target.presenter
            let queue = target.registration.queue
            var movedPaths: [String] = []
            for move in moves {
                movedPaths.append(move.fromPath)
                movedPaths.append(move.toPath)
                switch PresenterRelation(presenterPath: target.path, itemPath: move.fromPath) {
                case .item?:
                    let registration = target.registration
                    queue.post {
                        PresenterWatching.shared.follow(registration, to: move.to)
                        presenter.presentedItemDidMove(to: move.to)
                    }
                    queue.post { PresenterWatching.shared.start(registration) }
                case .descendant?:
                    let suffix = String(decoding: target.path.utf8.dropFirst(move.fromPath.utf8.count), as: UTF8.self)
                    let destination = URL(fileURLWithPath: move.toPath + suffix)
                    let registration = target.registration
                    queue.post {
                        PresenterWatching.shared.follow(registration, to: destination)
                        presenter.presentedItemDidMove(to: destination)
                    }
                    queue.post { PresenterWatching.shared.start(registration) }
                case .ancestor?:
                    queue.post { presenter.presentedSubitem(at: move.from, didMoveTo: move.to) }
                case nil:
                    if PresenterRelation(presenterPath: target.path, itemPath: move.toPath) == .ancestor {
                        queue.post { presenter.presentedSubitem(at: move.from, didMoveTo: move.to) }
                    }
                }
            }
            for outcome in outcomes {
                let item = outcome.item
                guard !item.intent.writingOptions.contains(.forDeleting),
                    !movedPaths.contains(where: { $0.utf8.elementsEqual(item.path.utf8) }),
                    let relation = PresenterRelation(presenterPath: target.path, itemPath: item.path)
                else { continue }
                let url = item.accessorURL
                switch (relation, outcome.existedBefore, outcome.existsAfter) {
                case (.item, _, true):
                    queue.post { presenter.presentedItemDidChange() }
                case (.ancestor, true, true):
                    queue.post { presenter.presentedSubitemDidChange(at: url) }
                case (.ancestor, false, true):
                    queue.post { presenter.presentedSubitemDidAppear(at: url) }
                case (.item, true, false), (.descendant, true, false):
                    queue.post { presenter.accommodatePresentedItemDeletion { _ in } }
                case (.ancestor, true, false):
                    queue.post { presenter.accommodatePresentedSubitemDeletion(at: url) { _ in } }
                default:
                    break
                }
            }
        }
    }
}
