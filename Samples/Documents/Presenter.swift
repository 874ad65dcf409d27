import FileCoordination
import Foundation

/// Presents one document and says, one line each, what it hears.
final class DocumentPresenter: FilePresenter, @unchecked Sendable {
    let presentedItemURL: URL?
    private let label: String
    private let say: @Sendable (String) -> Void

    init(_ url: URL, label: String, say: @escaping @Sendable (String) -> Void) {
        self.presentedItemURL = url
        self.label = label
        self.say = say
    }

    private func tell(_ message: String) { say(label.isEmpty ? message : "\(label): \(message)") }

    func presentedItemDidChange() { tell("the document changed") }
    func accommodatePresentedItemDeletion() throws { tell("the document is gone from its place") }
    func presentedItemDidGain(_ version: FileVersion) {
        tell(
            "a conflict arrived: \(version.url.lastPathComponent) (from \(version.localizedNameOfSavingComputer ?? "?"))"
        )
    }
    func presentedItemDidResolveConflict(_ version: FileVersion) {
        tell("the conflict \(version.url.lastPathComponent) was marked resolved")
    }
    func presentedItemDidLose(_ version: FileVersion) { tell("the version \(version.url.lastPathComponent) is gone") }
}
