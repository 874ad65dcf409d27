import FileCoordination
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A presenter in the helper process that prints every message it gets as "p<N> <message>", in
/// the words ``RecordingPresenter`` uses, and behaves as the command line says.
final class PrintingPresenter: FilePresenter, @unchecked Sendable {
    struct Behaviour {
        /// Text the presenter saves (a coordinated write, from inside the hook) when asked to save.
        var saveText: String?
        /// Block forever inside savePresentedItemChanges.
        var hangInSave = false
        /// Milliseconds to take inside savePresentedItemChanges.
        var saveDelay: UInt32 = 0
        /// Refuse deletions of the item and of items inside it.
        var vetoDeletion = false
    }

    private let lock = NSLock()
    private var url: URL
    private let tag: String
    private let behaviour: Behaviour

    init(_ url: URL, tag: String, behaviour: Behaviour) {
        self.url = url
        self.tag = tag
        self.behaviour = behaviour
    }

    var presentedItemURL: URL? { lock.withLock { url } }

    private func print(_ message: String) { say("\(tag) \(message)") }

    func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        print("relinquishToReader")
        reader { [self] in print("reacquire") }
    }

    func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        print("relinquishToWriter")
        writer { [self] in print("reacquire") }
    }

    func savePresentedItemChanges() throws {
        print("save")
        if behaviour.hangInSave { while true { pause() } }
        if behaviour.saveDelay > 0 { usleep(behaviour.saveDelay * 1000) }
        if let text = behaviour.saveText, let url = presentedItemURL {
            // Saving is itself a coordinated write: it must not wait for the coordination that asked.
            try FileCoordinator(filePresenter: self).replaceContentsOfItem(at: url, with: Data(text.utf8))
        }
    }

    struct Refusal: Error, CustomStringConvertible {
        var description: String { "the helper keeps this item" }
    }

    func accommodatePresentedItemDeletion() throws {
        print("accommodateDeletion")
        if behaviour.vetoDeletion { throw Refusal() }
    }

    func accommodatePresentedSubitemDeletion(at url: URL) throws {
        print("subitemDeletion:\(url.lastPathComponent)")
        if behaviour.vetoDeletion { throw Refusal() }
    }

    func presentedItemDidMove(to newURL: URL) {
        lock.withLock { url = newURL }
        print("didMove:\(newURL.lastPathComponent)")
    }

    func presentedItemDidChange() { print("didChange") }
    func presentedSubitemDidAppear(at url: URL) { print("subitemDidAppear:\(url.lastPathComponent)") }
    func presentedSubitemDidChange(at url: URL) { print("subitemDidChange:\(url.lastPathComponent)") }
    func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) {
        print("subitemDidMove:\(oldURL.lastPathComponent)->\(newURL.lastPathComponent)")
    }
    func presentedItemDidGain(_ version: FileVersion) { print("didGainVersion:\(version.url.lastPathComponent)") }
    func presentedItemDidLose(_ version: FileVersion) { print("didLoseVersion:\(version.url.lastPathComponent)") }
    func presentedItemDidResolveConflict(_ version: FileVersion) {
        print("didResolveConflict:\(version.url.lastPathComponent)")
    }
    func presentedSubitem(at url: URL, didGain version: FileVersion) {
        print("subitemDidGainVersion:\(url.lastPathComponent)/\(version.url.lastPathComponent)")
    }
    func presentedSubitem(at url: URL, didLose version: FileVersion) {
        print("subitemDidLoseVersion:\(url.lastPathComponent)/\(version.url.lastPathComponent)")
    }
    func presentedSubitem(at url: URL, didResolve version: FileVersion) {
        print("subitemDidResolveConflict:\(url.lastPathComponent)/\(version.url.lastPathComponent)")
    }
}

/// present [--save-text TEXT] [--hang-save] [--save-delay MS] [--veto-delete] [--count N] PATH...:
/// registers N presenters of each PATH (p0, p1, ... in order), says "presenting", and stays
/// until killed.
func runPresent(_ arguments: [String]) -> Never {
    var behaviour = PrintingPresenter.Behaviour()
    var count = 1
    var paths: [String] = []
    var index = 1
    while index < arguments.count {
        switch arguments[index] {
        case "--save-text":
            index += 1
            behaviour.saveText = arguments[index]
        case "--hang-save": behaviour.hangInSave = true
        case "--save-delay":
            index += 1
            behaviour.saveDelay = UInt32(arguments[index]) ?? 0
        case "--veto-delete": behaviour.vetoDeletion = true
        case "--count":
            index += 1
            count = Int(arguments[index]) ?? 1
        default: paths.append(arguments[index])
        }
        index += 1
    }
    var presenters: [PrintingPresenter] = []
    for path in paths {
        for _ in 0..<count {
            let presenter = PrintingPresenter(
                URL(fileURLWithPath: path),
                tag: "p\(presenters.count)",
                behaviour: behaviour
            )
            presenters.append(presenter)
            FileCoordinator.addFilePresenter(presenter)
        }
    }
    say("presenting")
    while true {
        pause()
        withExtendedLifetime(presenters) {}
    }
}
